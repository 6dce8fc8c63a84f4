package indexer_test

import (
	"testing"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/indexer"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// TestReconcileIndexesPacksMissingTwice: packs in the store that no event
// announced are indexed by the reconciler at its second pass (a pack
// missing once is usually one whose event is still queued), packs already
// indexed are left alone, and a corrupt pack is dead-lettered, not retried
// at every pass.
func TestReconcileIndexesPacksMissingTwice(t *testing.T) {
	ctx := t.Context()
	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	cfg := config.Default()
	nc, js, err := natsx.Connect(ctx, cfg.NATS, srv.ClientURL(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := natsx.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(t.TempDir(), "local")
	if err != nil {
		t.Fatal(err)
	}
	ix, err := indexer.New(cfg, indexer.Deps{JS: js, Catalog: chtest.Conn(t), Packs: store})
	if err != nil {
		t.Fatal(err)
	}
	cat := ix.Catalog()
	if err := cat.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	row := func(id int64) []catalogtest.Row {
		return []catalogtest.Row{catalogtest.Ins(100, uint64(id), map[string]any{"id": id, "tenant": "shop1"})}
	}
	indexed := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p-indexed", row(1))
	ref, err := catalog.ReadRef(ctx, store, indexed.Path())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Index(ctx, store, []catalog.PackRef{ref}); err != nil {
		t.Fatal(err)
	}
	var orphans []catalog.PackKey
	for _, id := range []string{"p-orphan-1", "p-orphan-2", "p-orphan-3"} {
		m := catalogtest.Write(t, store, catalogtest.Items, "shop1", id, row(2))
		orphans = append(orphans, catalog.PackKey{StoreID: "local", PackID: m.PackID})
	}
	if err := store.Put(ctx, "shop1/public.items/p-corrupt.arrow", []byte("not a pack")); err != nil {
		t.Fatal(err)
	}

	if n, err := ix.Reconcile(ctx); err != nil || n != 0 {
		t.Fatalf("first pass indexed %d (%v), want 0: a pack missing once may still have its event queued", n, err)
	}
	if n, err := ix.Reconcile(ctx); err != nil || n != len(orphans) {
		t.Fatalf("second pass indexed %d (%v), want %d", n, err, len(orphans))
	}
	done, err := cat.Indexed(ctx, orphans)
	if err != nil || len(done) != len(orphans) {
		t.Fatalf("inventory has %d of %d orphans (%v)", len(done), len(orphans), err)
	}
	if n, err := ix.Reconcile(ctx); err != nil || n != 0 {
		t.Fatalf("third pass indexed %d (%v), want 0", n, err)
	}
	dlq, err := js.Stream(ctx, proto.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("dead letters: %d, want 1 (the corrupt pack, once)", info.State.Msgs)
	}
}
