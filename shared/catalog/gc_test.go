package catalog_test

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

var policy = catalog.CompactPolicy{MinPacks: 2, SmallBytes: 1 << 20, MaxBytes: 1 << 30}

// lifeTTL is the lease ttl of the lifecycle tests: long, because they read
// every snapshot between publishes on a shared, loaded machine.
const lifeTTL = 5 * time.Minute

// lpublish is publish with lifeTTL.
func lpublish(t testing.TB, c *catalog.Catalog, l *catalog.Lease) catalog.Snapshot {
	t.Helper()
	if l.LeaseID == "" {
		var err error
		if *l, err = c.AcquireLease(t.Context(), "test", lifeTTL); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Publish(t.Context(), *l, lifeTTL, 0)
	if err != nil {
		t.Fatal(err)
	}
	*l = res.Lease
	return res.Snapshot
}

// storeFiles lists every file under the store's root (temp files too).
func storeFiles(t *testing.T, s *packstore.DirStore) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(s.Root(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(s.Root(), p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type lifecycleFixture struct {
	c     *catalog.Catalog
	conn  catalog.Conn
	store *packstore.DirStore
	l     catalog.Lease
	dests []string
	v1    uint64
	want  map[string][]map[string]any // v1's reads, system columns included
}

// newLifecycle indexes and publishes a history of two destinations at v1
// (pinned when pin) and reads it.
func newLifecycle(t *testing.T, pin bool) *lifecycleFixture {
	conn := chtest.Conn(t)
	f := &lifecycleFixture{conn: conn, store: openStore(t, "s1"), dests: []string{"shopA", "shopB"}, want: map[string][]map[string]any{}}
	f.c = catalog.New(conn, catalog.Options{Prefix: "sluice", GCGrace: time.Millisecond})
	if err := f.c.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	metas := history(t, f.store, rand.New(rand.NewPCG(7, 2)), f.dests, 9)
	index(t, f.c, f.store, metas...)
	f.v1 = lpublish(t, f.c, &f.l).Version
	if pin {
		if _, err := f.c.PinSnapshot(t.Context(), f.v1, "audit"); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range f.dests {
		f.want[d] = readAll(t, f.c, d, catalogtest.Items.Name, f.v1, 7, true)
	}
	return f
}

// compact runs one compaction pass and returns its stats.
func (f *lifecycleFixture) compact(t *testing.T) catalog.CompactStats {
	t.Helper()
	st, l, err := f.c.Compact(t.Context(), f.l, lifeTTL, f.store, policy, "compact1")
	if err != nil {
		t.Fatal(err)
	}
	f.l = l
	return st
}

// expire publishes a few snapshots and advances the expiry horizon past
// everything but the newest, then waits out the (tiny) grace.
func (f *lifecycleFixture) expire(t *testing.T) {
	t.Helper()
	for range 3 {
		lpublish(t, f.c, &f.l)
	}
	if _, err := f.c.AdvanceRetention(t.Context(), f.l, catalog.RetentionPolicy{Retention: time.Microsecond, RetainMin: 1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // past gc_grace (1ms): the GC horizon is the horizon
}

// same reports whether dest reads at version as v1 did (with identity:
// the same members; without: after compaction).
func (f *lifecycleFixture) same(t *testing.T, version uint64, identity bool) bool {
	t.Helper()
	for _, d := range f.dests {
		got := readAll(t, f.c, d, catalogtest.Items.Name, version, 7, true)
		want := f.want[d]
		if !identity {
			got, want = withoutIdentity(got), withoutIdentity(clone(want))
		}
		if !reflect.DeepEqual(got, want) {
			t.Logf("%s at %d:\n got %v\nwant %v", d, version, got, want)
			return false
		}
	}
	return true
}

func clone(rows []map[string]any) []map[string]any {
	out := make([]map[string]any, len(rows))
	for i, r := range rows {
		m := map[string]any{}
		for k, v := range r {
			m[k] = v
		}
		out[i] = m
	}
	return out
}

// TestPinnedReadSurvivesCompactionAndGC: after a compaction of every
// member and a GC pass with the pinned v1 expired by age, v1 reads exactly
// as before (same rows, same pack identities) and the latest snapshot
// reads as v1 did (pack identities aside); once unpinned, the next pass
// deletes the old members' files, rows and inventory rows, v1 answers
// ErrExpired, and the store holds only the compacted segment.
func TestPinnedReadSurvivesCompactionAndGC(t *testing.T) {
	defer catalog.SetMaxRemovalsPerPublish(5)() // several replacement publishes, each read below
	f := newLifecycle(t, true)
	st := f.compact(t)
	if st.Members == 0 || st.Snapshot.Version <= f.v1 {
		t.Fatalf("compaction did nothing: %+v", st)
	}
	for v := f.v1 + 1; v <= st.Snapshot.Version; v++ {
		if !f.same(t, v, false) {
			t.Fatalf("snapshot %d of the compaction reads differently", v)
		}
	}
	f.expire(t)
	gs, err := f.c.CollectGarbage(t.Context(), f.store, catalog.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gs.Members != 0 || gs.Files != 0 {
		t.Fatalf("GC deleted %+v while v1 is pinned", gs)
	}
	if !f.same(t, f.v1, true) {
		t.Fatal("pinned v1 reads differently after compaction and GC")
	}
	if err := f.c.UnpinSnapshot(t.Context(), f.v1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	gs, err = f.c.CollectGarbage(t.Context(), f.store, catalog.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gs.Members != st.Members || gs.Files == 0 || gs.Watermarks == 0 {
		t.Fatalf("GC after the unpin: %+v, want the %d removed members, their files and expired watermark rows", gs, st.Members)
	}
	if _, err := f.c.Read(t.Context(), catalog.ReadRequest{Destination: "shopA", Table: catalogtest.Items.Name, Version: f.v1}); !errors.Is(err, catalog.ErrExpired) {
		t.Fatalf("read of the collected v1: got %v, want ErrExpired", err)
	}
	if !f.same(t, 0, false) {
		t.Fatal("the latest snapshot reads differently after GC")
	}
	if files := storeFiles(t, f.store); !reflect.DeepEqual(files, []string{st.Segment}) {
		t.Fatalf("store holds %v, want only the compacted segment %s", files, st.Segment)
	}
	res, err := f.conn.Query(t.Context(), "SELECT count(), uniqExact(_sluice_pack_id) FROM `sluice_rows.public.items`")
	if err != nil {
		t.Fatal(err)
	}
	if n, p := res.Rows[0][0], res.Rows[0][1]; n != uint64(st.OutRows) || p != uint64(1) {
		t.Fatalf("rows table holds %v rows of %v packs, want %d of the segment", n, p, st.OutRows)
	}
	// A second pass finds nothing more.
	if gs, err := f.c.CollectGarbage(t.Context(), f.store, catalog.GCOptions{}); err != nil || gs.Members+gs.Files != 0 {
		t.Fatalf("second pass: %+v, %v", gs, err)
	}
}

// TestGCNegativeControlIgnoringRetention: GC that ignores pins and the
// horizons deletes what the pinned v1 reads, which then reads differently.
func TestGCNegativeControlIgnoringRetention(t *testing.T) {
	f := newLifecycle(t, true)
	f.compact(t)
	defer catalog.SetGCIgnoresRetention(true)()
	if _, err := f.c.CollectGarbage(t.Context(), f.store, catalog.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if f.same(t, f.v1, true) {
		t.Fatal("v1 reads the same after GC ignored its pin: the test does not see what GC deletes")
	}
}
