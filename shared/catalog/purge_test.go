package catalog_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// destinationsInStore decodes every file of the store and returns the
// destinations whose rows it holds, per file.
func destinationsInStore(t *testing.T, s *packstore.DirStore) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, p := range storeFiles(t, s) {
		data, err := s.Get(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		meta, recs, err := packstore.DecodePack(data, memory.DefaultAllocator)
		if err != nil {
			t.Fatalf("decoding %s: %v", p, err)
		}
		seen := map[string]bool{}
		for _, r := range recs {
			if idx := r.Schema().FieldIndices(proto.ColDestination); len(idx) == 1 {
				col := r.Column(idx[0])
				for i := 0; i < int(r.NumRows()); i++ {
					seen[col.ValueStr(i)] = true
				}
			} else if r.NumRows() > 0 {
				seen[meta.Destination] = true
			}
			r.Release()
		}
		for d := range seen {
			out[p] = append(out[p], d)
		}
	}
	return out
}

// TestPurgeLeavesNothingOfTheDestination: a destination whose rows lie in
// its own packs and in segments beside two others is purged: no file of
// the store holds a row of it (every file decoded), no inventory row or
// rows-table row names it, the other destinations read exactly as before
// (pack identities aside), and the snapshots before the purge are
// expired. A pinned snapshot holding it blocks the purge first, with an
// error naming the pin.
func TestPurgeLeavesNothingOfTheDestination(t *testing.T) {
	conn := chtest.Conn(t)
	store := openStore(t, "s1")
	c := catalog.New(conn, catalog.Options{Prefix: "sluice", GCGrace: time.Hour})
	if err := c.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	dests := []string{"shopA", "shopB", "shopC"}
	index(t, c, store, history(t, store, rand.New(rand.NewPCG(3, 4)), dests, 9)...)
	var l catalog.Lease
	v1 := lpublish(t, c, &l).Version
	// An older compaction of shopB (its segment members removed, the
	// segment files still holding its rows beside the others').
	if _, l2, err := c.Compact(t.Context(), l, lifeTTL, store, catalog.CompactPolicy{MinPacks: 2, SmallBytes: 1, MaxBytes: 1}, "compact1"); err != nil {
		t.Fatal(err)
	} else {
		l = l2
	}
	before := map[string][]map[string]any{}
	for _, d := range []string{"shopA", "shopC"} {
		before[d] = withoutIdentity(readAll(t, c, d, catalogtest.Items.Name, 0, 5, true))
	}
	if _, err := c.PinSnapshot(t.Context(), v1, "legal hold"); err != nil {
		t.Fatal(err)
	}
	_, l, err := c.Purge(t.Context(), l, lifeTTL, store, "shopB", "purge1")
	if !errors.Is(err, catalog.ErrPurgePinned) || !strings.Contains(err.Error(), "snapshot 1 (legal hold)") {
		t.Fatalf("purge under a pin: got %v, want ErrPurgePinned naming snapshot 1", err)
	}
	if err := c.UnpinSnapshot(t.Context(), v1); err != nil {
		t.Fatal(err)
	}
	st, l, err := c.Purge(t.Context(), l, lifeTTL, store, "shopB", "purge1")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Done {
		t.Fatalf("purge left %+v", st)
	}
	for p, ds := range destinationsInStore(t, store) {
		for _, d := range ds {
			if d == "shopB" {
				t.Fatalf("file %s still holds rows of shopB", p)
			}
		}
	}
	for _, q := range []string{
		"SELECT count() FROM sluice_packs WHERE destination = 'shopB'",
		"SELECT count() FROM `sluice_rows.public.items` WHERE _sluice_destination = 'shopB'",
	} {
		res, err := conn.Query(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		if n := res.Rows[0][0]; n != uint64(0) {
			t.Fatalf("%s: %v", q, n)
		}
	}
	for d, want := range before {
		got := withoutIdentity(readAll(t, c, d, catalogtest.Items.Name, 0, 5, true))
		if !jsonEqualAny(got, want) {
			t.Fatalf("%s reads differently after the purge:\n got %v\nwant %v", d, got, want)
		}
	}
	if p, err := c.Read(t.Context(), catalog.ReadRequest{Destination: "shopB", Table: catalogtest.Items.Name}); err != nil || len(p.Rows) != 0 {
		t.Fatalf("read of the purged destination: %d rows, %v", len(p.Rows), err)
	}
	if _, err := c.Read(t.Context(), catalog.ReadRequest{Destination: "shopA", Table: catalogtest.Items.Name, Version: v1}); !errors.Is(err, catalog.ErrExpired) {
		t.Fatalf("read of a snapshot before the purge: got %v, want ErrExpired", err)
	}
	// Running it again finds nothing to do.
	if st, _, err := c.Purge(t.Context(), l, lifeTTL, store, "shopB", "purge1"); err != nil || !st.Done {
		t.Fatalf("second purge: %+v, %v", st, err)
	}
}

// TestPurgeNegativeControlNoRewrite: a purge that leaves the segments it
// shares with other destinations as they are leaves the destination's rows
// in a file of the store (the decode-every-file check sees it).
func TestPurgeNegativeControlNoRewrite(t *testing.T) {
	defer catalog.SetPurgeNoRewrite(true)()
	store := openStore(t, "s1")
	c := catalog.New(chtest.Conn(t), catalog.Options{Prefix: "sluice", GCGrace: time.Hour})
	if err := c.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	index(t, c, store, history(t, store, rand.New(rand.NewPCG(3, 4)), []string{"shopA", "shopB"}, 6)...)
	var l catalog.Lease
	lpublish(t, c, &l)
	if _, _, err := c.Purge(t.Context(), l, lifeTTL, store, "shopB", "purge1"); err != nil {
		t.Fatal(err)
	}
	for _, ds := range destinationsInStore(t, store) {
		for _, d := range ds {
			if d == "shopB" {
				return // caught
			}
		}
	}
	t.Fatal("no file holds shopB's rows although the shared segments were not rewritten: the check does not see them")
}
