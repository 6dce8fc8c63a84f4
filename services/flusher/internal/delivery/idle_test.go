package delivery

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/proto"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// Bounded state: 400 destinations, each flushed once (one partition
// message per partition holding all of its destinations), leave the
// flusher's memory once idle for delivery.idle_evict; one that reappears
// is created at its persisted cursor, reloaded in one statement for its
// fetched group, so an old batch redelivered to it does not move its
// cursor back.
func TestIdleDestinationsEvictedAndReloaded(t *testing.T) {
	const n = 400
	e := newEnv(t, func(c *cfgpkg.Config) {
		c.Delivery.Partitions = 4
		c.Delivery.FlushInterval = 200 * time.Millisecond
		c.Delivery.IdleEvict = 2 * time.Second
	})
	r := e.start(t, "a", nil)
	publishOneRowEach(t, e, "ev", n)
	inMemory := func() (shell, core int) {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		for _, p := range r.m.parts {
			core += len(p.c.Dests())
		}
		return len(r.m.dests), core
	}
	waitFor(t, 60*time.Second, "every destination flushed", func() bool {
		return e.allPacked(t) && testutilValue(r.m, "ok") >= n
	})
	waitFor(t, 30*time.Second, "idle destinations evicted", func() bool {
		s, c := inMemory()
		return s == 0 && c == 0
	})
	if got := testutil.ToFloat64(r.m.im.evicted); got < n {
		t.Fatalf("%v evictions, want >= %d", got, n)
	}

	// ev007 reappears with an old batch (below its cursor, as a replayed
	// batch would be): flushed again, its cursor in memory is the
	// persisted one, not the batch's position.
	d := "ev007"
	want := e.cursor(t, d)
	loads := testutil.ToFloat64(r.m.im.loads)
	ok := testValueOK(r.m)
	e.publish(t, d, []pt.Row{{ID: 7, LSN: 50, Seq: 1}})
	waitFor(t, 10*time.Second, "the old batch flushed", func() bool { return testValueOK(r.m) > ok })
	r.m.mu.Lock()
	got := proto.Position{}
	if dd, found := r.m.dests[d]; found {
		got = dd.c.Cursor()
	}
	r.m.mu.Unlock()
	if got != want {
		t.Fatalf("reappeared destination's cursor in memory is %s, want the persisted %s", got, want)
	}
	if c := e.cursor(t, d); c != want {
		t.Fatalf("persisted cursor moved from %s to %s", want, c)
	}
	if testutil.ToFloat64(r.m.im.loads) <= loads {
		t.Fatal("no cursor load for the reappeared destination")
	}
	s, c := inMemory()
	if s > 1 || c > 1 {
		t.Fatalf("%d shell / %d core destinations in memory after one reappeared", s, c)
	}
}

func testValueOK(m *Manager) float64 { return testutilValue(m, "ok") }

// Under memory pressure (each destination in memory counts destOverhead
// against delivery.memory_budget) idle destinations leave memory at once,
// long before delivery.idle_evict.
func TestMemoryPressureEvictsIdleDestinations(t *testing.T) {
	const n = 400 // 400 KiB of destination state
	e := newEnv(t, func(c *cfgpkg.Config) {
		c.Delivery.Partitions = 4
		c.Delivery.FlushInterval = 200 * time.Millisecond
		c.Delivery.IdleEvict = time.Hour
		c.Delivery.MemoryBudget = 256 << 10
	})
	r := e.start(t, "a", nil)
	publishOneRowEach(t, e, "mp", n)
	waitFor(t, 60*time.Second, "every destination flushed", func() bool {
		return e.allPacked(t) && testutilValue(r.m, "ok") >= n
	})
	waitFor(t, 30*time.Second, "memory under budget", func() bool {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		return !r.m.overBudgetLocked()
	})
	if got := testutil.ToFloat64(r.m.im.evicted); got < 1 {
		t.Fatalf("%v evictions with the destinations' state over the budget and idle_evict 1h", got)
	}
}

// publishOneRowEach publishes one row to each of n destinations named
// prefix000…, one partition message per partition holding all of its
// destinations.
func publishOneRowEach(t *testing.T, e *env, prefix string, n int) {
	t.Helper()
	byPart := map[int][]destRows{}
	for i := 0; i < n; i++ {
		d := fmt.Sprintf("%s%03d", prefix, i)
		p := proto.Partition(d, e.cfg.Delivery.Partitions)
		byPart[p] = append(byPart[p], destRows{d, []pt.Row{{ID: int64(i), LSN: 100, Seq: uint64(i + 1)}}})
	}
	for _, parts := range byPart {
		e.publishParts(t, parts...)
	}
}
