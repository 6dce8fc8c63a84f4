package catalog_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// TestCompactionKeepsItsLease (issue 32): a compaction pass whose reading,
// storing and indexing take longer than the publisher lease's ttl (a pass
// over a backfilled table took 27 s against the 10 s default on a busy
// 2-core machine) keeps its lease, renewed in the background, and
// publishes its replacement. Without the renewal the pass failed with
// ErrLeaseLost every time it ran, its work thrown away, and the table was
// never compacted. The slow step is a hook that sleeps between storing
// the segment and indexing it (2.5 ttls): a real pass is that slow only
// on a loaded machine.
func TestCompactionKeepsItsLease(t *testing.T) {
	conn := chtest.Conn(t)
	store := openStore(t, "s1")
	c := catalog.New(conn, catalog.Options{Prefix: "keeplease"})
	if err := c.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	var metas []packstore.PackMeta
	for n := range 3 {
		metas = append(metas, writeFlush(t, store, n, 1000+uint64(n)*histRows))
	}
	index(t, c, store, metas...)
	var l catalog.Lease
	lpublish(t, c, &l)
	const ttl = 2 * time.Second
	l, err := c.RenewLease(t.Context(), l, ttl) // the lease from now on lives ttl past each renewal
	if err != nil {
		t.Fatal(err)
	}
	catalog.SetLifecycleHooks(func() { time.Sleep(5 * ttl / 2) }, nil, nil, nil)
	defer catalog.SetLifecycleHooks(nil, nil, nil, nil)
	st, l2, err := c.Compact(t.Context(), l, ttl, store, catalog.CompactPolicy{MinPacks: 2, SmallBytes: 1, MaxBytes: 1 << 30}, "compact1")
	if errors.Is(err, catalog.ErrLeaseLost) {
		t.Fatalf("a compaction pass slower than the lease's ttl lost the lease: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if st.Members == 0 || st.Snapshot.Version == 0 {
		t.Fatalf("nothing compacted: %+v", st)
	}
	if l2.Term <= l.Term+1 {
		t.Fatalf("lease term %d after the pass, %d before: not renewed during it", l2.Term, l.Term)
	}
	t.Logf("compacted %d members of %d destinations; lease term %d -> %d", st.Members, len(st.Destinations), l.Term, l2.Term)
}
