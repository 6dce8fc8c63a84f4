package delivery

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/proto"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// An abrupt stop mid-flush (no drain, NATS connection dropped, leases not
// released), then a new instance: every change reaches a pack, and no
// cursor ever passed an unflushed change.
func TestAbruptStopThenNewInstance(t *testing.T) {
	e := newEnv(t, func(c *cfgpkg.Config) {
		c.Delivery.FlushInterval = 100 * time.Millisecond
		c.Delivery.LeaseTTL = time.Second
	})
	var v violations
	gate := make(chan struct{})
	a := e.start(t, "a", func(m *Manager) {
		m.abrupt = true
		m.afterAdvance = v.hook(t, e)
		blocked := false
		m.beforeAck = func(string) {
			// The first flush to reach its ack after four flushes are done
			// is mid-way (pack and cursor written, not acked) at the kill.
			// (Called from the one committer goroutine.)
			if !blocked && testutil.ToFloat64(m.m.flushes.WithLabelValues("ok")) >= 4 {
				blocked = true
				<-gate
			}
		}
	})
	lsn := uint64(100)
	send := func(n int) {
		for i := 0; i < n; i++ {
			lsn++
			e.publish(t, fmt.Sprintf("t%d", i%10), []pt.Row{{ID: int64(i % 7), LSN: lsn, Seq: 1}, {ID: int64(i%7 + 100), LSN: lsn, Seq: 2}})
		}
	}
	send(60)
	waitFor(t, 10*time.Second, "some flushes", func() bool { return testutil.ToFloat64(a.m.m.flushes.WithLabelValues("ok")) >= 4 })
	send(40)
	a.nc.Close() // the connection drops: acks and naks go nowhere
	close(gate)
	a.stop()

	b := e.start(t, "b", func(m *Manager) { m.afterAdvance = v.hook(t, e) })
	send(40)
	waitFor(t, 60*time.Second, "every change in a pack", func() bool { return e.allPacked(t) })
	waitFor(t, 30*time.Second, "everything acked", func() bool {
		x, _ := e.ackPending(t, 0)
		y, _ := e.ackPending(t, 1)
		return x+y == 0
	})
	if errs := v.get(); len(errs) > 0 {
		t.Fatalf("cursor passed unflushed changes: %v", errs)
	}
	for i := 0; i < 10; i++ {
		d := fmt.Sprintf("t%d", i)
		if err := e.checkCursor(t, d, e.cursor(t, d)); err != nil {
			t.Fatal(err)
		}
	}
	_ = b
}

// 10,000 destinations with one small message each, MaxAckPending far
// below that: the ack-pending trigger keeps delivery flowing and nothing
// is redelivered while it waits for its flush.
func TestTenThousandDestinations(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 flushes")
	}
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("FANOUT_N")); err == nil {
		n = v
	}
	e := newEnv(t, func(c *cfgpkg.Config) {
		c.Delivery.Partitions = 4
		c.Delivery.MaxAckPending = 1000
		c.Delivery.Workers = 8
		c.Delivery.FlushInterval = 20 * time.Second // the last few hundred wait for it
		// Not a lease test: on a loaded machine a 2s lease can lapse while
		// 10,000 messages are decoded, and the takeover naks (redelivers).
		c.Delivery.LeaseTTL = 20 * time.Second
	})
	var groups, want atomic.Int64 // group commits, and the segments their sizes call for
	r := e.start(t, "a", func(m *Manager) {
		m.beforeGroup = func() { groups.Add(1) }
		m.afterSegments = func(flushes, _ int) { want.Add(int64((flushes + segmentMaxDests - 1) / segmentMaxDests)) }
	})
	publishMany(t, e, n, 0)
	start := time.Now()
	last := time.Now()
	waitFor(t, 5*time.Minute, "10,000 flushes", func() bool {
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			st := r.m.Status()
			t.Logf("ok=%v failed=%v buffered=%d queued=%d states=%v", testutil.ToFloat64(r.m.m.flushes.WithLabelValues("ok")), testutil.ToFloat64(r.m.m.flushes.WithLabelValues("failed")), st.BufferedRows, st.Queued, st.States)
		}
		return testutil.ToFloat64(r.m.m.flushes.WithLabelValues("ok")) >= float64(n)
	})
	t.Logf("10,000 destinations flushed in %s (%.0f/s)", time.Since(start), float64(n)/time.Since(start).Seconds())
	redelivered := 0
	for p := 0; p < 4; p++ {
		pend, red := e.ackPending(t, p)
		if pend != 0 {
			waitFor(t, 10*time.Second, "acks", func() bool { x, _ := e.ackPending(t, p); return x == 0 })
		}
		redelivered += red
	}
	if redelivered != 0 || testutil.ToFloat64(r.m.m.redelivered) != 0 {
		t.Fatalf("%d messages redelivered", redelivered)
	}
	// One file per table per group commit and segmentMaxDests
	// destinations, holding every destination of the group: the files do
	// not grow with the destinations.
	files := 0
	held := map[string]bool{}
	err := e.store.List(e.ctx, proto.SegmentsDir+"/", func(path string) error {
		files++
		b, err := e.store.Get(e.ctx, path)
		if err != nil {
			return err
		}
		meta, _, err := packstore.ReadPackMeta(b)
		if err != nil {
			return err
		}
		entries, err := meta.Entries()
		for _, en := range entries {
			held[en.Destination] = true
		}
		return err
	})
	t.Logf("%d files for %d destinations in %d group commits", files, n, groups.Load())
	if err != nil || len(held) != n || int64(files) != want.Load() {
		t.Fatalf("%d files (%v) hold %d destinations, want %d in one file per group commit and %d destinations (%d groups, %d files)",
			files, err, len(held), n, segmentMaxDests, groups.Load(), want.Load())
	}
}

// publishMany publishes one one-row message to each of n destinations.
func publishMany(t testing.TB, e *env, n int, round int) {
	rec := pt.Batch(nil, []pt.Row{{ID: 1, Tenant: "x", Op: proto.OpInsert, LSN: uint64(1000 + round), Seq: 1}})
	defer rec.Release()
	for i := 0; i < n; i++ {
		d := fmt.Sprintf("dest%05d", i)
		one := addDestinations(rec, []string{d})
		body := mustEncode(t, one)
		one.Release()
		h := nats.Header{}
		h.Set(proto.HeaderWire, proto.WireVersion)
		h.Set(proto.HeaderTable, "public.items")
		msg := &nats.Msg{Subject: proto.RoutedPartitionSubject(proto.Partition(d, e.cfg.Delivery.Partitions)), Header: h, Data: body}
		if _, err := e.js.PublishMsgAsync(msg); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 { // stay under the client's async window (4,000), which stalls on a loaded machine
			select {
			case <-e.js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				t.Fatal("async publishes did not complete")
			}
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("async publishes did not complete")
	}
}
