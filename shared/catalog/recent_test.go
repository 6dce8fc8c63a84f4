package catalog_test

import (
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// TestRecentPacks: a destination's newest packs come newest first by
// their last position, only its own, at most limit, with their counts and
// LSN range; a bad destination name is refused.
func TestRecentPacks(t *testing.T) {
	c := newCatalog(t, chtest.Conn(t))
	store := openStore(t, "s1")
	p1 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{
		catalogtest.Ins(0x100, 1, item(1, "shop1", nil)), catalogtest.Ins(0x100, 2, item(2, "shop1", nil))})
	p2 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p2", []catalogtest.Row{
		catalogtest.Del(0x300, 1, map[string]any{"id": int64(1), "tenant": "shop1"})})
	p3 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p3", []catalogtest.Row{
		catalogtest.Ins(0x200, 1, item(3, "shop1", nil))})
	other := catalogtest.Write(t, store, catalogtest.Items, "shop2", "q1", []catalogtest.Row{
		catalogtest.Ins(0x400, 1, item(9, "shop2", nil))})
	index(t, c, store, p1, p2, p3, other)

	got, err := c.RecentPacks(t.Context(), "shop1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].PackID != "p2" || got[1].PackID != "p3" {
		t.Fatalf("newest two packs of shop1: %+v, want p2 then p3", got)
	}
	if g := got[0]; g.Table != catalogtest.Items.Name || g.Rows != 1 || g.Tombstones != 1 || g.FirstLSN != "0/300" || g.LastLSN != "0/300" || g.Bytes <= 0 || g.IndexedAt.IsZero() {
		t.Fatalf("p2: %+v", g)
	}
	all, err := c.RecentPacks(t.Context(), "shop1", 10)
	if err != nil || len(all) != 3 || all[2].PackID != "p1" || all[2].Rows != 2 {
		t.Fatalf("all packs of shop1: %+v %v", all, err)
	}
	if _, err := c.RecentPacks(t.Context(), "bad name", 10); err == nil {
		t.Fatal("a bad destination name was accepted")
	}
}
