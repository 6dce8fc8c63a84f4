package catalog_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// TestCompactionKeepsClears: compacting members that hold clears (a
// TRUNCATE inside a transaction, then a resync's scoped clear with an older
// bound than its stream place) keeps the newest clear, so the compacted
// segment reads exactly as the members do: the rows below the clear stay
// hidden. Negative control: the same compacted read ignoring clears shows
// the truncated rows, so the compacted segment still holds them and only
// the kept clear hides them.
func TestCompactionKeepsClears(t *testing.T) {
	conn := chtest.Conn(t)
	store := openStore(t, "s1")
	tbl := catalogtest.Items.Name
	p1 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{
		catalogtest.Ins(100, 1, item(1, "shop1", nil)),
		catalogtest.Ins(100, 2, item(2, "shop1", nil)),
	})
	p2 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p2", []catalogtest.Row{
		catalogtest.Ins(110, 1, item(3, "shop1", nil)),
		catalogtest.Clear(110, 2, nil),
		catalogtest.Ins(110, 3, item(4, "shop1", nil)),
	})
	p3 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p3", []catalogtest.Row{
		catalogtest.Ins(120, 1, item(5, "shop1", nil)),
		catalogtest.Clear(115, 0, map[string]any{"tenant": "shop1"}),
		catalogtest.Ins(121, 1, item(6, "shop1", nil)),
	})
	full := catalog.New(conn, catalog.Options{Prefix: "cfull"})
	if err := full.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	index(t, full, store, p1, p2, p3)
	var lf catalog.Lease
	vf := publish(t, full, &lf, 0).Version

	seg, err := catalog.BuildCompacted(t.Context(), store, tbl, p1.Schema, segID(9998),
		[]catalog.CompactInput{{Destination: "shop1", Paths: []string{p1.Path(), p2.Path(), p3.Path()}}})
	if err != nil {
		t.Fatal(err)
	}
	cstore := openStore(t, "s1")
	if err := cstore.Put(t.Context(), seg.Path, seg.Data); err != nil {
		t.Fatal(err)
	}
	comp := catalog.New(conn, catalog.Options{Prefix: "ccomp"})
	if err := comp.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	ref, err := catalog.ReadRef(t.Context(), cstore, seg.Path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := comp.Index(t.Context(), cstore, []catalog.PackRef{ref}); err != nil {
		t.Fatal(err)
	}
	var lc catalog.Lease
	vc := publish(t, comp, &lc, 0).Version

	want := withoutIdentity(readAll(t, full, "shop1", tbl, vf, 1000, true))
	got := withoutIdentity(readAll(t, comp, "shop1", tbl, vc, 1000, true))
	if ids := clearIDs(want); !slices.Equal(ids, []int{5, 6}) {
		t.Fatalf("members read ids %v, want [5 6]", ids)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("compacted segment reads differently:\n got %v\nwant %v", got, want)
	}
	catalog.SetIgnoreClears(comp, true)
	defer catalog.SetIgnoreClears(comp, false)
	if ids := clearIDs(readAll(t, comp, "shop1", tbl, vc, 1000, true)); len(ids) <= 2 {
		t.Fatalf("negative control: ignoring clears the compacted segment reads %v: it holds no row below the clear, so the test does not see the clear kept", ids)
	}
}
