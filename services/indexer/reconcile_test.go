package indexer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/indexer"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
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

// TestReconcileDeadLettersEveryCorruptPack: N corrupt files in the store
// give N dead letters, each naming its path and reason in headers and
// carrying the pack event that replays to its PACKS subject; a later sweep
// of the same files (another indexer, which has not marked them) adds none.
// Before, the dead letters had no body and one message id, so JetStream
// kept the first and dropped the others as duplicates (and a pack whose
// body was damaged failed every pass).
func TestReconcileDeadLettersEveryCorruptPack(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	good, _ := catalogtest.Encode(t, catalogtest.Items, "local", "shop1", "p-sound", rowsOf("shop1", 0, 2000))
	other, _ := catalogtest.Encode(t, catalogtest.Items, "local", "shop9", "p-elsewhere", rowsOf("shop9", 0, 3))
	files := map[string][]byte{
		"shop1/public.items/p-garbage.arrow":   []byte("not a pack"),
		"shop1/public.items/p-truncated.arrow": good[:len(good)/2],
		"shop2/public.items/p-sound.arrow":     good,                    // footer names shop1
		"shop3/public.items/p-elsewhere.arrow": other,                   // footer names shop9
		"shop1/public.items/p-sound.arrow":     pt.DamageBody(good, 64), // its own path, body damaged
	}
	for p, b := range files {
		if err := h.store.Put(ctx, p, b); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 2 {
		if round == 1 {
			// The restart comes after JetStream's duplicate window (2
			// minutes; made 100 ms here): the same dead letter would be
			// stored again, so the new indexer must know the files the DLQ
			// already names.
			shrinkDuplicateWindow(t, h.js, proto.StreamDLQ, 100*time.Millisecond)
		}
		ix, err := indexer.New(h.cfg, indexer.Deps{JS: h.js, Catalog: h.conn, Packs: h.store})
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.Catalog().EnsureSchema(ctx); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := ix.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if st := ix.Status(); round == 0 && st.DeadLettered != int64(len(files)) {
			t.Fatalf("status %+v, want %d dead letters", st, len(files))
		}
		dls := h.deadLetters(t)
		if len(dls) != len(files) {
			t.Fatalf("round %d: %d dead letters for %d corrupt files", round, len(dls), len(files))
		}
		seen := map[string]bool{}
		for _, dl := range dls {
			path := dl.Header.Get(indexer.HeaderPackPath)
			if files[path] == nil || seen[path] {
				t.Fatalf("dead letter names path %q", path)
			}
			seen[path] = true
			if dl.Header.Get(proto.HeaderReason) == "" || dl.Header.Get(indexer.HeaderStoreID) != "local" {
				t.Fatalf("dead letter of %s: headers %v", path, dl.Header)
			}
			dest, _, _ := strings.Cut(path, "/")
			if got := dl.Header.Get(proto.HeaderOrigSubject); got != proto.PacksSubject(dest) {
				t.Fatalf("dead letter of %s replays to %s", path, got)
			}
			rec, err := arrowcodec.Decode(dl.Data, nil)
			if err != nil {
				t.Fatalf("dead letter body of %s: %v", path, err)
			}
			col := rec.Column(rec.Schema().FieldIndices("path")[0]).(*array.String)
			if col.Value(0) != path {
				t.Fatalf("dead letter body names %s, want %s", col.Value(0), path)
			}
			rec.Release()
		}
	}
}

// shrinkDuplicateWindow sets stream's Nats-Msg-Id duplicate window to d
// and waits it out, so a message published again after it is stored again.
func shrinkDuplicateWindow(t *testing.T, js jetstream.JetStream, stream string, d time.Duration) {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.Duplicates = d
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * d)
}
