package delivery

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// TestIntervalTriggerVisitsOnlyDue: a tick of the trigger loop examines the
// buffers that are due, not every buffering destination (it runs every
// flush_interval/20 under the manager's lock, so at 10,000 tenants a walk
// over every buffer was the loop's whole cost), and every due buffer is
// still flushed by it.
func TestIntervalTriggerVisitsOnlyDue(t *testing.T) {
	const n = 1000
	e := newEnv(t, func(c *config.Config) {
		c.Delivery.MaxAckPending = 4 * n
		c.Delivery.LeaseTTL = 30 * time.Second // not a lease test: a loaded machine must not lose leases
	})
	r := e.start(t, "due", nil)
	publishMany(t, e, n, 0)
	waitFor(t, time.Minute, "every message buffered", func() bool { return r.m.Status().BufferedRows == n })
	visits := func() int64 {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		return r.m.evalVisits
	}
	v0 := visits()
	for range 10 {
		r.m.evaluate(time.Now()) // flush_interval is 1h: nothing is due
	}
	if v := visits() - v0; v != 0 {
		t.Fatalf("10 ticks with nothing due examined %d destinations, want 0 (of %d buffering)", v, n)
	}
	base := testutil.ToFloat64(r.m.m.flushes.WithLabelValues("ok"))
	v0 = visits()
	r.m.evaluate(time.Now().Add(2 * time.Hour)) // every buffer is due
	waitFor(t, 2*time.Minute, "every due buffer flushed", func() bool {
		return testutil.ToFloat64(r.m.m.flushes.WithLabelValues("ok")) >= base+n
	})
	if v := visits() - v0; v > 2*n {
		t.Fatalf("flushing %d due buffers examined %d destinations", n, v)
	}
}

// TestGroupCommitTakesEveryWaitingFlush: a group commit takes every
// resolved flush waiting (1,000 here, above the 512 a group once took), so
// thousands of destinations due together pay the group's fsyncs and round
// trips a few times, not once per 512; its rows are cut into segments of
// at most segmentMaxDests destinations (the PACKS event has a row per
// destination), all written in the group, and every flush commits.
func TestGroupCommitTakesEveryWaitingFlush(t *testing.T) {
	const n = 1000
	e := newEnv(t, func(c *config.Config) {
		c.Delivery.Partitions = 1
		c.Delivery.MaxAckPending = 4 * n
		c.Delivery.LeaseTTL = 30 * time.Second // not a lease test
	})
	var mu sync.Mutex
	var groups [][2]int // (flushes, segments) per group commit
	var g *groupGate
	r := e.start(t, "a", func(m *Manager) {
		g = holdGroup(t, m, n)
		m.afterSegments = func(flushes, segments int) {
			mu.Lock()
			groups = append(groups, [2]int{flushes, segments})
			mu.Unlock()
		}
	})
	groupDests(t, e, r, g)
	waitFor(t, time.Minute, "every flush committed", func() bool { return testutilValue(r.m, "ok") == n })
	mu.Lock()
	defer mu.Unlock()
	if want := (n + segmentMaxDests - 1) / segmentMaxDests; len(groups) != 1 || groups[0] != [2]int{n, want} {
		t.Fatalf("group commits (flushes, segments) %v, want one of %d flushes in %d segments", groups, n, want)
	}
	files := e.segmentFiles(t)
	held := map[string]bool{}
	for _, f := range files {
		data, err := e.store.Get(e.ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		meta, _, err := packstore.ReadPackMeta(data)
		if err != nil {
			t.Fatal(err)
		}
		entries, err := meta.Entries()
		if err != nil || len(entries) > segmentMaxDests {
			t.Fatalf("segment %s holds %d destinations (%v), at most %d", f, len(entries), err, segmentMaxDests)
		}
		for _, en := range entries {
			held[en.Destination] = true
		}
	}
	if len(files) != groups[0][1] || len(held) != n {
		t.Fatalf("%d files hold %d destinations, want %d files holding %d", len(files), len(held), groups[0][1], n)
	}
}

// TestSegmentEventStaysInBudget: a group's destinations share one segment
// per table until its PACKS event's estimate (each destination's name plus
// eventEntryCost) would pass the budget, half of nats.max_payload; every
// event published is within it, and the events of many destinations are
// compressed. Control: with the budget off (segmentMaxDests alone) the
// same group is one segment whose event is over this budget.
func TestSegmentEventStaysInBudget(t *testing.T) {
	const n, budget = 1000, 16 << 10
	for _, bounded := range []bool{true, false} {
		t.Run(fmt.Sprintf("bounded=%v", bounded), func(t *testing.T) {
			e := newEnv(t, func(c *config.Config) {
				c.Delivery.Partitions = 1
				c.Delivery.MaxAckPending = 4 * n
				c.Delivery.LeaseTTL = 30 * time.Second // not a lease test
			})
			var g *groupGate
			r := e.start(t, "a", func(m *Manager) {
				g = holdGroup(t, m, n)
				m.eventBudget = budget
				if !bounded {
					m.eventBudget = math.MaxInt
				}
			})
			dests := groupDests(t, e, r, g)
			waitFor(t, time.Minute, "every flush committed", func() bool { return testutilValue(r.m, "ok") == n })
			est := 0
			for _, d := range dests {
				est += len(d) + eventEntryCost
			}
			events := e.packEvents(t)
			largest := 0
			for _, ev := range events {
				largest = max(largest, len(ev.Data()))
			}
			if !bounded {
				if len(events) != 1 || largest <= budget {
					t.Fatalf("unbounded: %d events, largest %d bytes, want one over %d", len(events), largest, budget)
				}
				return
			}
			if want := (est + budget - 1) / budget; len(events) < want || largest > budget {
				t.Fatalf("%d events (want at least %d), largest %d bytes over the %d budget", len(events), want, largest, budget)
			}
		})
	}
}

// TestNewDestinationFlushesAtOnce: with flush_interval an hour, a new
// destination's first rows are flushed at once (trigger "first", before
// any interval could pass) and its cursor row written, so a new pipeline's
// first snapshot, or a new tenant's first rows, are published seconds
// after the change (issue 37); its next rows wait for the interval, as
// every buffer of a flushed destination does. Control: with the rule off
// (the harness's default) its first rows wait for the interval too.
func TestNewDestinationFlushesAtOnce(t *testing.T) {
	for _, rule := range []bool{true, false} {
		t.Run(fmt.Sprintf("rule=%v", rule), func(t *testing.T) {
			e := newEnv(t, nil)
			r := e.start(t, "first", func(m *Manager) { m.noFirstFlush = !rule })
			first := func() float64 { return testutil.ToFloat64(r.m.m.triggers.WithLabelValues("first")) }
			e.publish(t, "d1", []pt.Row{{ID: 1, LSN: 10, Seq: 1}})
			if !rule {
				waitFor(t, 30*time.Second, "buffered", func() bool { return r.m.Status().BufferedRows == 1 })
				// Two trigger ticks (flush_interval/20, at most 1s) and
				// past any settling: nothing flushes.
				time.Sleep(2500 * time.Millisecond)
				r.m.evaluate(time.Now())
				if n := testutilValue(r.m, "ok"); n != 0 || first() != 0 {
					t.Fatalf("control: with the rule off a new destination flushed %v times (%v first) within its interval", n, first())
				}
				return
			}
			waitFor(t, 30*time.Second, "the new destination's first flush", func() bool { return testutilValue(r.m, "ok") == 1 })
			if first() != 1 || len(e.packed(t, "d1")) != 1 {
				t.Fatalf("first flush: %v by the first trigger, %d rows packed", first(), len(e.packed(t, "d1")))
			}
			e.publish(t, "d1", []pt.Row{{ID: 2, LSN: 11, Seq: 1}})
			waitFor(t, 30*time.Second, "buffered", func() bool { return r.m.Status().BufferedRows == 1 })
			time.Sleep(2500 * time.Millisecond)
			r.m.evaluate(time.Now())
			if n := testutilValue(r.m, "ok"); n != 1 || first() != 1 {
				t.Fatalf("a flushed destination's next rows flushed before its interval (%v flushes, %v first)", n, first())
			}
		})
	}
}
