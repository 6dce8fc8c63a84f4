package delivery

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/shared/config"
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
