package delivery

import (
	"testing"
	"time"

	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// takeoverScenario: replica c receives change X (position 100) of d and
// dies without acking it; a takes the partition over once c's lease
// expires, receives change Y (position 200) and flushes it while X is
// still ack-pending at the dead c (its AckWait has hours to run). The
// cursor must not pass X: a's pending set has never seen it.
func takeoverScenario(t *testing.T, noSettle bool) []error {
	e := newEnv(t, func(c *cfgpkg.Config) {
		c.Delivery.Partitions = 1
		c.Delivery.FlushInterval = time.Hour
		// Long enough that a's own lease survives a loaded machine's
		// stalls (at 1s, a stall of a second lost it under load 21, a
		// dropped its buffer unflushed and the control could not bite);
		// c's expiry is waited for, not timed.
		c.Delivery.LeaseTTL = 3 * time.Second
	})
	var v violations
	const d = "d"
	owns := func(id string) func() bool {
		return func() bool { return e.leaseHolders(t)[0] == id }
	}
	buffered := func(r *running, rows int64) func() bool {
		return func() bool { return r.m.Status().BufferedRows == rows }
	}
	c := e.start(t, "c", func(m *Manager) { m.abrupt = true; m.afterAdvance = v.hook(t, e) })
	waitFor(t, 20*time.Second, "c owns the partition", owns("c"))
	e.publish(t, d, []pt.Row{{ID: 1, LSN: 100, Seq: 1}})
	waitFor(t, 20*time.Second, "c buffers X", buffered(c, 1))
	c.nc.Close()
	c.stop()

	a := e.start(t, "a", func(m *Manager) { m.noSettle = noSettle; m.afterAdvance = v.hook(t, e) })
	waitFor(t, 20*time.Second, "a takes the partition over", owns("a"))
	e.publish(t, d, []pt.Row{{ID: 2, LSN: 200, Seq: 1}})
	waitFor(t, 20*time.Second, "a buffers Y", buffered(a, 1))
	a.stop() // drains: Y is flushed and its cursor write attempted
	t.Logf("cursor of %s after the drain: %s", d, e.cursor(t, d))
	return v.get()
}

// TestTakeoverWaitsForSettle: a partition taken over from a dead owner
// advances no cursor while a message is ack-pending elsewhere (rule 3).
func TestTakeoverWaitsForSettle(t *testing.T) {
	if testing.Short() {
		t.Skip("lease expiry")
	}
	if errs := takeoverScenario(t, false); len(errs) > 0 {
		t.Fatalf("a cursor passed a change pending at the dead owner: %v", errs)
	}
}

// TestTakeoverSettleNegativeControl: seeded at claim (the old behaviour),
// the new owner's cursor passes the dead owner's message.
func TestTakeoverSettleNegativeControl(t *testing.T) {
	if testing.Short() {
		t.Skip("lease expiry")
	}
	if errs := takeoverScenario(t, true); len(errs) == 0 {
		t.Fatal("seeded at claim, the cursor did not pass the dead owner's message: the control did not bite")
	}
}
