package catalog_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// clearIDs returns the sorted ids of rows.
func clearIDs(rows []map[string]any) []int {
	var out []int
	for _, r := range rows {
		out = append(out, int(r["id"].(float64)))
	}
	slices.Sort(out)
	return out
}

// A clear hides the rows of its destination's table below its position in
// every snapshot that holds it, and nothing else: not the rows after it (in
// the same transaction and pack, too), not another destination's rows, not
// an earlier snapshot's reads. The newest clear among a snapshot's members
// gives the bound, also when it is positioned below an older one's stream
// place (a resync's clear carries its first low watermark). Negative
// control: reads that ignore clears return the cleared rows.
func TestClear(t *testing.T) {
	for _, be := range chtest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := t.Context()
			c := newCatalog(t, be.Conn)
			store := openStore(t, "s1")
			tbl := catalogtest.Items.Name
			p1 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{
				catalogtest.Ins(100, 1, item(1, "shop1", nil)),
				catalogtest.Ins(100, 2, item(2, "shop1", nil)),
			})
			o1 := catalogtest.Write(t, store, catalogtest.Items, "shop2", "o1", []catalogtest.Row{
				catalogtest.Ins(100, 3, item(9, "shop2", nil)),
			})
			index(t, c, store, p1, o1)
			var l catalog.Lease
			s1 := publish(t, c, &l, 0x100)

			// A TRUNCATE inside a transaction: an insert before it, one after.
			p2 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p2", []catalogtest.Row{
				catalogtest.Ins(110, 1, item(3, "shop1", nil)),
				catalogtest.Clear(110, 2, nil),
				catalogtest.Ins(110, 3, item(4, "shop1", nil)),
			})
			index(t, c, store, p2)
			s2 := publish(t, c, &l, 0x110)

			// A clear with an older bound than its place in the stream (the
			// end of a resync, bound at its first low watermark 115/0 below
			// the row at 120/1 that the stream carried before it).
			p3 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p3", []catalogtest.Row{
				catalogtest.Ins(120, 1, item(5, "shop1", nil)),
				catalogtest.Clear(115, 0, map[string]any{"tenant": "shop1"}),
			})
			index(t, c, store, p3)
			s3 := publish(t, c, &l, 0x120)

			want := []struct {
				v          uint64
				dest       string
				ids, stale []int
			}{
				{s1.Version, "shop1", []int{1, 2}, []int{1, 2}},
				{s2.Version, "shop1", []int{4}, []int{1, 2, 3, 4}},
				{s3.Version, "shop1", []int{5}, []int{1, 2, 3, 4, 5}},
				{s3.Version, "shop2", []int{9}, []int{9}},
			}
			for _, ignore := range []bool{false, true} {
				t.Run(fmt.Sprintf("ignoreClears=%v", ignore), func(t *testing.T) {
					catalog.SetIgnoreClears(c, ignore)
					defer catalog.SetIgnoreClears(c, false)
					for _, w := range want {
						exp := w.ids
						if ignore {
							exp = w.stale
						}
						for _, page := range []int{1, 1000} {
							if got := clearIDs(readAll(t, c, w.dest, tbl, w.v, page, true)); !slices.Equal(got, exp) {
								t.Errorf("%s at version %d (pages of %d): ids %v, want %v", w.dest, w.v, page, got, exp)
							}
						}
					}
				})
			}

			// The latest view applies each destination's own clears.
			res, err := be.Conn.Query(ctx, "SELECT _sluice_destination, id FROM `sluice_latest.public.items` ORDER BY _sluice_destination, id")
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(res.Rows); got != "[[shop1 5] [shop2 9]]" {
				t.Errorf("latest view: %s, want [[shop1 5] [shop2 9]]", got)
			}
		})
	}
}
