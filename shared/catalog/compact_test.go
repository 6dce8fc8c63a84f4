package catalog_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// history writes a random history of items for dests: packs per
// destination and segments over all of them, with inserts, updates (some
// with TOAST-unchanged columns), deletes and re-inserts of a few keys; it
// returns the metas in write order. Positions grow with the pack index, so
// every later pack is newer.
func history(t *testing.T, store packstore.Store, rng *rand.Rand, dests []string, packs int) []packstore.PackMeta {
	t.Helper()
	var out []packstore.PackMeta
	lsn := uint64(1000)
	row := func(dest string) catalogtest.Row {
		lsn++
		id := int64(rng.IntN(12) + 1)
		switch r := rng.IntN(10); {
		case r < 2:
			return catalogtest.Del(lsn, 1, map[string]any{"id": id, "tenant": dest})
		case r < 5:
			// TOAST-unchanged big, doc and tags: the read fills them from the
			// newest earlier row that carried them.
			v := item(id, dest, map[string]any{"name": fmt.Sprintf("upd-%d", lsn), "big": nil, "doc": nil, "tags": nil})
			return catalogtest.Upd(lsn, 1, v, "big", "doc", "tags")
		}
		return catalogtest.Ins(lsn, 1, item(id, dest, map[string]any{"big": fmt.Sprintf("big-%d", lsn), "tags": []any{fmt.Sprint(lsn), nil}}))
	}
	for p := 0; p < packs; p++ {
		if p%3 == 2 {
			var parts []catalogtest.Part
			for _, d := range dests {
				parts = append(parts, catalogtest.Part{Destination: d, Rows: []catalogtest.Row{row(d), row(d), row(d)}})
			}
			out = append(out, catalogtest.WriteSegment(t, store, catalogtest.Items, segID(100+p), parts))
			continue
		}
		for _, d := range dests {
			out = append(out, catalogtest.Write(t, store, catalogtest.Items, d, fmt.Sprintf("p%03d-%s", p, d), []catalogtest.Row{row(d), row(d), row(d), row(d)}))
		}
	}
	return out
}

// withoutIdentity drops the pack identity columns a compacted row changes.
func withoutIdentity(rows []map[string]any) []map[string]any {
	for _, r := range rows {
		delete(r, "_sluice_store_id")
		delete(r, "_sluice_pack_id")
	}
	return rows
}

// TestCompactedRowsReadLikeTheirMembers: the segment compaction writes for
// a history of packs and segments (updates with TOAST-unchanged columns,
// deletes, re-inserts) reads, system columns included, exactly as the
// members do; and so it does after a later pack of older positions (what a
// backfill or a resync may admit after the compaction) is added to both.
func TestCompactedRowsReadLikeTheirMembers(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			if diff := compactAndCompare(t, seed); diff != "" {
				t.Fatal(diff)
			}
		})
	}
}

// TestCompactionNegativeControlWinnersOnly: keeping only each key's winner
// (not the rows TOAST carry-forward reads) makes a compacted read differ.
func TestCompactionNegativeControlWinnersOnly(t *testing.T) {
	defer catalog.SetCompactWinnersOnly(true)()
	if diff := compactAndCompare(t, 1); diff == "" {
		t.Fatal("winners-only compaction read like the members: the test does not see TOAST carry-forward")
	}
}

// compactAndCompare writes a history (seeded), compacts it into one segment
// and returns how a read of the segment in a fresh catalog differs from a
// read of the members ("" for none), before and after a later pack of older
// positions is added to both.
func compactAndCompare(t *testing.T, seed uint64) string {
	conn := chtest.Conn(t)
	store := openStore(t, "s1")
	dests := []string{"shopA", "shopB"}
	metas := history(t, store, rand.New(rand.NewPCG(seed, 2)), dests, 12)

	full := catalog.New(conn, catalog.Options{Prefix: "full"})
	if err := full.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	index(t, full, store, metas...)
	var lf catalog.Lease
	vf := publish(t, full, &lf, 0).Version

	var ins []catalog.CompactInput
	for _, d := range dests {
		in := catalog.CompactInput{Destination: d}
		for _, m := range metas {
			if m.Destination == d || m.IsSegment() {
				in.Paths = append(in.Paths, m.Path())
			}
		}
		ins = append(ins, in)
	}
	seg, err := catalog.BuildCompacted(t.Context(), store, catalogtest.Items.Name, metas[0].Schema, segID(9999), ins)
	if err != nil {
		t.Fatal(err)
	}
	if seg.OutRows >= seg.InRows || seg.OutRows == 0 {
		t.Fatalf("compaction kept %d of %d rows", seg.OutRows, seg.InRows)
	}
	t.Logf("compaction kept %d of %d rows", seg.OutRows, seg.InRows)
	cstore := openStore(t, "s1")
	if err := cstore.Put(t.Context(), seg.Path, seg.Data); err != nil {
		t.Fatal(err)
	}
	comp := catalog.New(conn, catalog.Options{Prefix: "comp"})
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

	compare := func(when string, vf, vc uint64) string {
		t.Helper()
		for _, d := range dests {
			want := withoutIdentity(readAll(t, full, d, catalogtest.Items.Name, vf, 5, true))
			got := withoutIdentity(readAll(t, comp, d, catalogtest.Items.Name, vc, 5, true))
			if len(want) == 0 {
				t.Fatalf("%s: %s reads nothing: the history is too small", when, d)
			}
			if !reflect.DeepEqual(got, want) {
				return fmt.Sprintf("%s: %s reads differently after compaction:\n got %v\nwant %v", when, d, got, want)
			}
		}
		return ""
	}
	if diff := compare("compacted", vf, vc); diff != "" {
		return diff
	}

	// A later pack of older positions: TOAST-unchanged updates and
	// inserts positioned between the members' rows.
	var late []catalogtest.Row
	for id := int64(1); id <= 12; id++ {
		if id%2 == 0 {
			late = append(late, catalogtest.Upd(1003+uint64(id), 2, item(id, "shopA", map[string]any{"big": nil, "doc": nil}), "big", "doc"))
		} else {
			late = append(late, catalogtest.Ins(1010+uint64(id), 2, item(id, "shopA", map[string]any{"big": fmt.Sprintf("late-%d", id)})))
		}
	}
	for _, c := range []struct {
		cat *catalog.Catalog
		st  packstore.Store
		l   *catalog.Lease
		v   *uint64
	}{{full, store, &lf, &vf}, {comp, cstore, &lc, &vc}} {
		m := catalogtest.Write(t, c.st, catalogtest.Items, "shopA", "late", late)
		index(t, c.cat, c.st, m)
		*c.v = publish(t, c.cat, c.l, 0).Version
	}
	return compare("after a later pack of older positions", vf, vc)
}

// A pass's compact_max_bytes counts each file its members are in once: the
// history benchmark's segments each hold all 20 destinations, so a bound of
// the bytes of the files is one pass over every destination (counting a
// segment once per destination, it took one destination a pass).
func TestCompactionCountsASharedSegmentOnce(t *testing.T) {
	conn := chtest.Conn(t)
	store := openStore(t, "s1")
	c := catalog.New(conn, catalog.Options{Prefix: "shared"})
	if err := c.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	var metas []packstore.PackMeta
	var bytes int64
	for n := range 3 {
		m := writeFlush(t, store, n, 1000+uint64(n)*histRows)
		metas = append(metas, m)
		data, err := store.Get(t.Context(), m.Path())
		if err != nil {
			t.Fatal(err)
		}
		bytes += int64(len(data))
	}
	index(t, c, store, metas...)
	var l catalog.Lease
	lpublish(t, c, &l)
	st, _, err := c.Compact(t.Context(), l, lifeTTL, store, catalog.CompactPolicy{MinPacks: 2, SmallBytes: 1, MaxBytes: bytes}, "compact1")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Destinations) != histTenants || st.Files != len(metas) || st.Members != histTenants*len(metas) {
		t.Fatalf("one pass bounded by the %d bytes of the %d files compacted %d destinations, %d members from %d files; want %d, %d from %d",
			bytes, len(metas), len(st.Destinations), st.Members, st.Files, histTenants, histTenants*len(metas), len(metas))
	}
}

// The small trigger counts a destination's share of a shared segment (the
// segment's bytes times the destination's fraction of its rows), not the
// whole file once per destination: a destination holding one row of each
// of two segments is not small data adding up to compact_small_bytes
// (counted by the whole file, two segments under the bound were enough to
// trigger every destination they hold), while a destination holding
// nearly all of a segment's rows is judged by nearly the whole file (so a
// split by destination count, not rows, would fail the second case).
// Per-destination packs count their bytes as before.
func TestCompactionSmallTriggerCountsSegmentShares(t *testing.T) {
	conn := chtest.Conn(t)
	store := openStore(t, "s1")
	c := newCatalog(t, conn)
	const bulkRows = 2000
	var metas []packstore.PackMeta
	var segBytes int64
	for n := range 2 {
		var bulk []catalogtest.Row
		for i := range bulkRows {
			id := int64(n*bulkRows + i)
			bulk = append(bulk, catalogtest.Ins(100+uint64(n), uint64(i+1), item(id, "bulk", nil)))
		}
		m := catalogtest.WriteSegment(t, store, catalogtest.Items, segID(n+1), []catalogtest.Part{
			{Destination: "bulk", Rows: bulk},
			{Destination: "tiny", Rows: []catalogtest.Row{catalogtest.Ins(100+uint64(n), 1, item(int64(n), "tiny", nil))}},
		})
		data, err := store.Get(t.Context(), m.Path())
		if err != nil {
			t.Fatal(err)
		}
		segBytes = max(segBytes, int64(len(data)))
		metas = append(metas, m)
	}
	var packBytes int64
	for n := range 2 {
		m := catalogtest.Write(t, store, catalogtest.Items, "solo", fmt.Sprintf("solo-%d", n), []catalogtest.Row{
			catalogtest.Ins(110+uint64(n), 1, item(int64(n), "solo", nil)),
		})
		data, err := store.Get(t.Context(), m.Path())
		if err != nil {
			t.Fatal(err)
		}
		packBytes = max(packBytes, int64(len(data)))
		metas = append(metas, m)
	}
	// tiny's two shares together are far below one solo pack, which is far
	// below a segment.
	if tinyShares := 2 * segBytes / (bulkRows + 1); tinyShares*4 > packBytes || packBytes*4 > segBytes {
		t.Fatalf("sizes do not separate the cases: segments %d bytes, packs %d, tiny's shares about %d", segBytes, packBytes, tinyShares)
	}
	index(t, c, store, metas...)
	var l catalog.Lease
	lpublish(t, c, &l)
	table := catalogtest.Items.Name
	for _, tc := range []struct {
		name  string
		small int64
		want  []string
	}{
		// Each segment is small by its whole size: bulk's shares (nearly
		// the whole file each) add up to the bound, tiny's do not.
		{"segments under the bound", segBytes + 1, []string{table + "/bulk"}},
		// bulk's share of each segment is over the bound: not small (half
		// the file, a split by destination count, would be small and add
		// up to it); tiny's and solo's small members add up to less.
		{"bulk's share over the bound", segBytes * 3 / 5, []string{}},
		// solo's two packs, each under the bound, add up to it; tiny's
		// shares are smaller still but add up to far less.
		{"packs under the bound", packBytes + 1, []string{table + "/solo"}},
	} {
		got, err := c.CompactCandidates(t.Context(), store.ID(), catalog.CompactPolicy{MinPacks: 100, SmallBytes: tc.small, MaxBytes: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s (compact_small_bytes %d; segments %d bytes, packs %d): the small trigger chose %v, want %v", tc.name, tc.small, segBytes, packBytes, got, tc.want)
		}
	}
	// The member-count trigger is unchanged: every destination with two
	// members.
	got, err := c.CompactCandidates(t.Context(), store.ID(), catalog.CompactPolicy{MinPacks: 2, SmallBytes: 1, MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	if want := []string{table + "/bulk", table + "/solo", table + "/tiny"}; !reflect.DeepEqual(got, want) {
		t.Errorf("compact_min_packs 2 chose %v, want %v", got, want)
	}
}
