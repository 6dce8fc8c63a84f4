package catalog_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

var segT0 = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

func segID(n int) string {
	return proto.SegmentID(segT0.Add(time.Duration(n)*time.Second), "w1", uint64(n))
}

// ids returns the sorted ids of rows.
func ids(rows []map[string]any) []float64 {
	var out []float64
	for _, r := range rows {
		out = append(out, r["id"].(float64))
	}
	sort.Float64s(out)
	return out
}

// inventoryRows is the inventory's (pack_id, destination, rows) rows.
func inventoryRows(t *testing.T, conn catalog.Conn, prefix string) []string {
	t.Helper()
	res, err := conn.Query(t.Context(), "SELECT pack_id, destination, rows, tombstones, first_lsn, last_lsn FROM "+prefix+"_packs ORDER BY pack_id, destination")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range res.Rows {
		out = append(out, strings.TrimSpace(fmt.Sprintln(r...)))
	}
	return out
}

// TestSegmentReadsEachDestination: a segment of three destinations is
// indexed by one statement and recorded by one inventory row per
// destination (with that destination's counts and positions); each
// destination reads exactly its own rows, and a snapshot counts the
// segment's three (segment, destination) members.
func TestSegmentReadsEachDestination(t *testing.T) {
	for _, be := range chtest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := newCatalog(t, be.Conn)
			store := openStore(t, "s1")
			m := catalogtest.WriteSegment(t, store, catalogtest.Items, segID(1), []catalogtest.Part{
				{Destination: "shopB", Rows: []catalogtest.Row{
					catalogtest.Ins(101, 1, item(1, "shopB", nil)), catalogtest.Ins(101, 2, item(2, "shopB", nil)),
				}},
				{Destination: "shopA", Rows: []catalogtest.Row{
					catalogtest.Ins(100, 1, item(1, "shopA", nil)),
				}},
				{Destination: "shopC", Rows: []catalogtest.Row{
					catalogtest.Ins(102, 1, item(1, "shopC", nil)), catalogtest.Ins(102, 2, item(3, "shopC", nil)),
					catalogtest.Del(103, 1, map[string]any{"id": int64(1), "tenant": "shopC"}),
				}},
			})
			st := index(t, c, store, m)
			if st.Packs != 1 || st.Rows != 6 || st.Inserts != 1 {
				t.Fatalf("index stats %+v, want one segment of 6 rows in one statement", st)
			}
			want := []string{
				m.PackID + " shopA 1 0 100 100",
				m.PackID + " shopB 2 0 101 101",
				m.PackID + " shopC 3 1 102 103",
			}
			if got := inventoryRows(t, be.Conn, "sluice"); !reflect.DeepEqual(got, want) {
				t.Fatalf("inventory\n got %v\nwant %v", got, want)
			}
			if n, err := c.Pending(t.Context()); err != nil || n != 3 {
				t.Fatalf("pending %d (%v), want 3 (segment, destination) rows", n, err)
			}
			// Indexing it again is skipped.
			if st := index(t, c, store, m); st.Skipped != 1 || st.Packs != 0 {
				t.Fatalf("second index %+v", st)
			}
			var l catalog.Lease
			snap := publish(t, c, &l, 103)
			if snap.NewPacks != 3 || snap.Packs != 3 {
				t.Fatalf("snapshot %+v, want 3 members", snap)
			}
			for dest, wantIDs := range map[string][]float64{"shopA": {1}, "shopB": {1, 2}, "shopC": {3}} {
				got := readAll(t, c, dest, catalogtest.Items.Name, snap.Version, 1, false)
				if g := ids(got); !reflect.DeepEqual(g, wantIDs) {
					t.Errorf("%s reads ids %v, want %v", dest, g, wantIDs)
				}
				for _, r := range got {
					if r["tenant"] != dest {
						t.Errorf("%s reads a row of %v", dest, r["tenant"])
					}
				}
			}
			if got := readAll(t, c, "shopD", catalogtest.Items.Name, snap.Version, 10, false); len(got) != 0 {
				t.Errorf("a destination the segment lacks reads %v", got)
			}
		})
	}
}

// TestStagedSegmentIndexEqualsInPlace indexes the same random segments and
// per-destination packs through staging files and in place, and requires
// every read, system columns included, to be identical.
func TestStagedSegmentIndexEqualsInPlace(t *testing.T) {
	conn, _ := chtest.ConnDB(t)
	staged, inPlace := newCatalogPrefix(t, conn, "segstaged"), newCatalogPrefix(t, conn, "seginplace")
	catalog.SetNoStaging(inPlace, true)
	store := openStore(t, "s1")
	r := rand.New(rand.NewPCG(5, 6))
	dests := []string{"shop1", "shop2", "shop3", "shop4"}
	var metas []packstore.PackMeta
	for p := range 24 {
		var parts []catalogtest.Part
		for _, dest := range dests {
			if r.IntN(3) == 0 {
				continue
			}
			var rows []catalogtest.Row
			for s := range 1 + r.IntN(5) {
				id := int64(r.IntN(10))
				lsn, seq := uint64(100+p), uint64(s+1)
				switch r.IntN(4) {
				case 0:
					rows = append(rows, catalogtest.Del(lsn, seq, map[string]any{"id": id, "tenant": dest}))
				case 1:
					rows = append(rows, catalogtest.Upd(lsn, seq, item(id, dest, map[string]any{"name": fmt.Sprintf("u%d", p), "big": nil, "tags": nil}), "big"))
				default:
					rows = append(rows, catalogtest.Ins(lsn, seq, item(id, dest, map[string]any{"qty": int32(p)})))
				}
			}
			parts = append(parts, catalogtest.Part{Destination: dest, Rows: rows})
		}
		if len(parts) == 0 {
			continue
		}
		if p%5 == 4 { // some per-destination packs beside the segments
			for i, part := range parts {
				metas = append(metas, catalogtest.Write(t, store, catalogtest.Items, part.Destination, fmt.Sprintf("p%02d-%d", p, i), part.Rows))
			}
			continue
		}
		metas = append(metas, catalogtest.WriteSegment(t, store, catalogtest.Items, segID(p), parts))
	}
	var l1, l2 catalog.Lease
	for _, c := range []struct {
		cat *catalog.Catalog
		l   *catalog.Lease
	}{{staged, &l1}, {inPlace, &l2}} {
		for i := 0; i < len(metas); i += 8 {
			if st := index(t, c.cat, store, metas[i:min(i+8, len(metas))]...); st.Packs != min(8, len(metas)-i) {
				t.Fatalf("index stats %+v", st)
			}
		}
		publish(t, c.cat, c.l, 1000)
	}
	if a, b := inventoryRows(t, conn, "segstaged"), inventoryRows(t, conn, "seginplace"); !reflect.DeepEqual(a, b) {
		t.Fatalf("inventories differ\nstaged:   %v\nin place: %v", a, b)
	}
	for _, d := range dests {
		for _, sys := range []bool{false, true} {
			a := readAll(t, staged, d, catalogtest.Items.Name, 0, 7, sys)
			b := readAll(t, inPlace, d, catalogtest.Items.Name, 0, 7, sys)
			if len(a) == 0 || !reflect.DeepEqual(a, b) {
				t.Fatalf("%s (system columns %v): staged read differs from in-place read\nstaged:   %v\nin place: %v", d, sys, a, b)
			}
			for _, row := range a {
				if row["tenant"] != d {
					t.Fatalf("%s reads a row of %v", d, row["tenant"])
				}
			}
		}
	}
	ents, _ := os.ReadDir(filepath.Join(conn.Dir(), "staging"))
	if len(ents) != 0 {
		t.Fatalf("staging files left behind: %v", ents)
	}
}

// TestRebuildFromBothFormats: a store holding per-destination packs and
// segments, with and without checksums, rebuilds into a catalog that
// reads every destination's rows from all of them; a damaged small pack
// is skipped as corrupt.
func TestRebuildFromBothFormats(t *testing.T) {
	conn := chtest.Conn(t)
	store := openStore(t, "s1")
	catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{catalogtest.Ins(100, 1, item(1, "shop1", nil))})
	catalogtest.Write(t, store, catalogtest.Items, "shop2", "p2", []catalogtest.Row{catalogtest.Ins(100, 2, item(1, "shop2", nil))})
	catalogtest.WriteSegment(t, store, catalogtest.Items, segID(1), []catalogtest.Part{
		{Destination: "shop1", Rows: []catalogtest.Row{catalogtest.Ins(101, 1, item(2, "shop1", nil))}},
		{Destination: "shop3", Rows: []catalogtest.Row{catalogtest.Ins(101, 2, item(1, "shop3", nil))}},
	})
	// A segment an hour later, under another hour directory.
	catalogtest.WriteSegment(t, store, catalogtest.Items, proto.SegmentID(segT0.Add(time.Hour), "w2", 0), []catalogtest.Part{
		{Destination: "shop2", Rows: []catalogtest.Row{catalogtest.Ins(102, 1, item(2, "shop2", nil))}},
	})
	// A pack written before checksums (no proto.MetaPackChecksum) is read;
	// a small (uncompressed) one whose value bytes were damaged is refused
	// by its checksum and counted.
	old, oldMeta := catalogtest.Encode(t, catalogtest.Items, "s1", "shop4", "p4", []catalogtest.Row{catalogtest.Ins(103, 1, item(1, "shop4", nil))})
	damaged, damagedMeta := catalogtest.Encode(t, catalogtest.Items, "s1", "shop5", "p5", []catalogtest.Row{catalogtest.Ins(103, 2, item(1, "shop5", nil))})
	for path, data := range map[string][]byte{oldMeta.Path(): pt.Unchecksummed(old), damagedMeta.Path(): pt.DamageBody(damaged, 1)} {
		if err := store.Put(t.Context(), path, data); err != nil {
			t.Fatal(err)
		}
	}
	st, err := catalog.Rebuild(t.Context(), conn, store, catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Packs != 5 || st.Rows != 6 || st.Corrupt != 1 {
		t.Fatalf("rebuild %+v, want 5 packs (2 segments) of 6 rows and 1 corrupt", st)
	}
	c := newCatalog(t, conn)
	for dest, want := range map[string][]float64{"shop1": {1, 2}, "shop2": {1, 2}, "shop3": {1}, "shop4": {1}} {
		if got := ids(readAll(t, c, dest, catalogtest.Items.Name, st.Version, 10, false)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s reads ids %v after the rebuild, want %v", dest, got, want)
		}
	}
}

// TestCorruptSegmentRefused: a segment damaged in its bytes or its index,
// or found at another segment's path, is refused as a corrupt pack (or a
// mismatch) before anything reads its rows, and a rebuild skips and counts
// it; the intact segment beside it (negative control) is indexed.
func TestCorruptSegmentRefused(t *testing.T) {
	conn := chtest.Conn(t)
	store := openStore(t, "s1")
	parts := []catalogtest.Part{
		{Destination: "shop1", Rows: []catalogtest.Row{catalogtest.Ins(100, 1, item(1, "shop1", nil))}},
		{Destination: "shop2", Rows: []catalogtest.Row{catalogtest.Ins(100, 2, item(1, "shop2", nil))}},
	}
	good := catalogtest.WriteSegment(t, store, catalogtest.Items, segID(1), parts)
	data, bad := catalogtest.EncodeSegment(t, catalogtest.Items, "s1", segID(2), parts)
	if err := store.Put(t.Context(), bad.Path(), pt.DamageBody(data, 7)); err != nil {
		t.Fatal(err)
	}
	if _, err := catalog.ReadRef(t.Context(), store, bad.Path()); !errors.Is(err, packstore.ErrCorruptPack) {
		t.Fatalf("damaged segment: %v, want ErrCorruptPack", err)
	}
	// A whole segment copied under another id's path.
	moved, _ := proto.SegmentPath(segID(3), catalogtest.Items.Name)
	gd, err := store.Get(t.Context(), good.Path())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(t.Context(), moved, gd); err != nil {
		t.Fatal(err)
	}
	if _, err := catalog.ReadRef(t.Context(), store, moved); !errors.Is(err, catalog.ErrPackMismatch) {
		t.Fatalf("moved segment: %v, want ErrPackMismatch", err)
	}
	st, err := catalog.Rebuild(t.Context(), conn, store, catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Packs != 1 || st.Corrupt != 2 {
		t.Fatalf("rebuild %+v, want the good segment indexed and two refused", st)
	}
}

// TestReadRefKeepsEntries: a segment's destination index is parsed once,
// with its footer (ReadRef), and what PackRef.Entries returns is what the
// footer holds; a ref made without reading (no index kept) parses Meta's.
func TestReadRefKeepsEntries(t *testing.T) {
	store := openStore(t, "s1")
	parts := []catalogtest.Part{
		{Destination: "shop1", Rows: []catalogtest.Row{catalogtest.Ins(100, 1, item(1, "shop1", nil))}},
		{Destination: "shop2", Rows: []catalogtest.Row{catalogtest.Ins(100, 2, item(1, "shop2", nil)), catalogtest.Ins(101, 1, item(2, "shop2", nil))}},
	}
	meta := catalogtest.WriteSegment(t, store, catalogtest.Items, segID(1), parts)
	ref, err := catalog.ReadRef(t.Context(), store, meta.Path())
	if err != nil {
		t.Fatal(err)
	}
	want, err := meta.Entries()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ref.Entries()
	if err != nil || !reflect.DeepEqual(got, want) || len(got) != 2 || got[1].Destination != "shop2" || got[1].Rows != 2 {
		t.Fatalf("entries kept by ReadRef: %+v, %v; footer: %+v", got, err, want)
	}
	bare := catalog.PackRef{Meta: ref.Meta}
	if got, err := bare.Entries(); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("entries of a ref not read: %+v, %v", got, err)
	}
}
