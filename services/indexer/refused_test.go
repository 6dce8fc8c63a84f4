package indexer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/indexer"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// TestRefusedTableHaltsOnlyItself: the packs of a table whose rows table
// the engine refuses (a column named _row_exists, which MergeTree
// reserves), in one batch with packs of an ordinary table, are
// dead-lettered with the engine's reason and the headers that halt their
// destinations for their table (docs/adr/0034-corrupt-pack-halts.md), their
// events terminated; the ordinary packs are indexed, and so is a later
// one. Before, the refusal was retried forever: the PACKS ack floor, and
// with it every table's through_lsn, stopped.
func TestRefusedTableHaltsOnlyItself(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	h.cfg.Indexer.BatchWait = 500 * time.Millisecond // the packs go into one batch
	ix, err := indexer.New(h.cfg, indexer.Deps{JS: h.js, Catalog: h.conn, Packs: h.store})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx) }()

	refused := catalogtest.Table{Name: "public.refused", PK: []string{"id"}, Routing: "tenant", Columns: []catalogtest.Col{
		{Name: "id", Kind: proto.KindInt64, PgType: "bigint"}, {Name: "tenant", Kind: proto.KindText, PgType: "text"},
		{Name: "_row_exists", Kind: proto.KindText, PgType: "text"}}}
	row := func(id int64, dest string) catalogtest.Row {
		return catalogtest.Ins(100, uint64(id), map[string]any{"id": id, "tenant": dest, "_row_exists": "yes"})
	}
	good1 := catalogtest.Write(t, h.store, catalogtest.Items, "shop1", "p-good-1", rowsOf("shop1", 0, 10))
	bad1 := catalogtest.Write(t, h.store, refused, "shop1", "p-bad-1", []catalogtest.Row{row(1, "shop1")})
	bad2 := catalogtest.Write(t, h.store, refused, "shop2", "p-bad-2", []catalogtest.Row{row(2, "shop2")})
	good2 := catalogtest.Write(t, h.store, catalogtest.Items, "shop2", "p-good-2", rowsOf("shop2", 0, 10))
	for _, m := range []packstore.PackMeta{good1, bad1, bad2, good2} {
		h.announce(t, m, 0)
	}
	cat := ix.Catalog()
	indexed := func(ms ...packstore.PackMeta) func() (bool, string) {
		return func() (bool, string) {
			var keys []catalog.PackKey
			for _, m := range ms {
				keys = append(keys, catalog.PackKey{StoreID: "local", PackID: m.PackID})
			}
			got, err := cat.Indexed(ctx, keys)
			return err == nil && len(got) == len(keys), fmt.Sprintf("%d of %d indexed (%v); status %+v", len(got), len(keys), err, ix.Status())
		}
	}
	eventually(t, 30*time.Second, "the ordinary packs indexed", indexed(good1, good2))
	eventually(t, 30*time.Second, "the refused packs dead-lettered", func() (bool, string) {
		n := len(h.deadLetters(t))
		return n == 2, fmt.Sprintf("%d dead letters", n)
	})
	h.waitSettled(t, 4)
	dests := map[string]bool{}
	for _, dl := range h.deadLetters(t) {
		reason := dl.Header.Get(proto.HeaderReason)
		if !strings.Contains(reason, "public.refused") || !strings.Contains(reason, "_row_exists") || !strings.Contains(reason, catalog.ErrBadSchema.Error()) {
			t.Fatalf("dead letter reason %q does not name the table and the engine's refusal", reason)
		}
		if dl.Header.Get(proto.HeaderTable) != "public.refused" || dl.Header.Get(proto.HeaderFirst) == "" || dl.Header.Get(proto.HeaderHaltDestinations) != "1" {
			t.Fatalf("dead letter without the halt headers: %v", dl.Header)
		}
		dests[dl.Header.Get(proto.HeaderDestination)] = true
	}
	if !dests["shop1"] || !dests["shop2"] {
		t.Fatalf("halted destinations %v, want shop1 and shop2", dests)
	}
	if got, _ := cat.Indexed(ctx, []catalog.PackKey{{StoreID: "local", PackID: bad1.PackID}, {StoreID: "local", PackID: bad2.PackID}}); len(got) != 0 {
		t.Fatalf("a refused pack is in the inventory: %v", got)
	}
	later := catalogtest.Write(t, h.store, catalogtest.Items, "shop1", "p-good-3", rowsOf("shop1", 10, 10))
	h.announce(t, later, 0)
	eventually(t, 30*time.Second, "a later pack indexed", indexed(later))
	select {
	case err := <-done:
		t.Fatalf("the indexer stopped: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
