package delivery

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
	"github.com/sluice-cdc/sluice/shared/state"
)

// violations collects cursor-promise violations seen at every cursor write.
type violations struct {
	mu   sync.Mutex
	errs []error
}

func (v *violations) hook(t testing.TB, e *env) func(string, proto.Position) {
	return func(dest string, pos proto.Position) {
		if err := e.checkCursor(t, dest, pos); err != nil {
			v.mu.Lock()
			v.errs = append(v.errs, err)
			v.mu.Unlock()
		}
	}
}

func (v *violations) get() []error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]error(nil), v.errs...)
}

// prefixScenario: change B (pos 20) is in flight when change A (pos 10),
// published late by another router, arrives. The flush of B must not move
// the cursor past A.
func prefixScenario(t *testing.T, scalar bool) []error {
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.FlushRows = 1; c.Delivery.Partitions = 1 })
	var v violations
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	r := e.start(t, "a", func(m *Manager) {
		m.scalarMaxCursor = scalar
		m.afterAdvance = v.hook(t, e)
		first := true
		m.putFault = func(string, []string) error {
			if first {
				first = false
				entered <- struct{}{}
				<-gate
			}
			return nil
		}
	})
	e.publish(t, "d", []pt.Row{{ID: 2, LSN: 20, Seq: 1}})
	<-entered
	e.publish(t, "d", []pt.Row{{ID: 1, LSN: 10, Seq: 1}})
	waitFor(t, 5*time.Second, "A buffered", func() bool { return r.m.Status().BufferedRows == 2 })
	// Hold A's flush until B's cursor write has been checked.
	r.m.mu.Lock()
	r.m.dests["d"].queued = true
	r.m.mu.Unlock()
	close(gate)
	waitFor(t, 5*time.Second, "B flushed", func() bool { return len(e.packed(t, "d")) == 1 && e.cursor(t, "d") != proto.Position{} })
	r.m.mu.Lock()
	r.m.dests["d"].queued = false
	r.m.enqueueLocked(r.m.dests["d"], "test")
	r.m.mu.Unlock()
	waitFor(t, 5*time.Second, "A flushed", func() bool { return e.allPacked(t) })
	waitFor(t, 5*time.Second, "cursor at B", func() bool { return e.cursor(t, "d") == proto.Position{LSN: 20, Seq: 1} })
	return v.get()
}

func TestPrefixCompleteCursor(t *testing.T) {
	if errs := prefixScenario(t, false); len(errs) > 0 {
		t.Fatalf("cursor passed an unflushed change: %v", errs)
	}
}

// Negative control: a scalar-max cursor passes change A while it is only in
// memory; a crash at that instant would leave the cursor claiming A.
func TestNegativeControlScalarMaxCursor(t *testing.T) {
	if errs := prefixScenario(t, true); len(errs) == 0 {
		t.Fatal("negative control: the scalar-max cursor did not pass the unflushed change")
	}
}

// failureScenario replays the Viaduck interleaving: a fetch returns message
// B for destination d; before B is buffered, d's in-flight flush (of A)
// fails for good and rewinds d; then B is buffered. B must be discarded
// (epoch), and no cursor write may pass A, which is away for redelivery.
func failureScenario(t *testing.T, unsafe bool) []error {
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.Partitions = 1 })
	var v violations
	var failing sync.Mutex
	fail := true
	r := e.start(t, "a", func(m *Manager) {
		m.afterAdvance = v.hook(t, e)
		// A fake store fault: the directory store cannot be made to fail
		// on demand.
		m.putFault = func(string, []string) error {
			failing.Lock()
			defer failing.Unlock()
			if fail {
				return errors.New("injected pack write failure")
			}
			return nil
		}
		if unsafe {
			m.noEpochCheck, m.forgetNaked, m.keepLiveOnFailure = true, true, true
		}
	})
	e.publish(t, "d", []pt.Row{{ID: 1, LSN: 10, Seq: 1}})
	waitFor(t, 5*time.Second, "A buffered", func() bool { return r.m.Status().BufferedRows == 1 })
	r.m.pauseFetch.Store(true)
	waitFor(t, 5*time.Second, "fetch loop paused", r.m.fetchPausedSeen.Load)
	e.publish(t, "d", []pt.Row{{ID: 2, LSN: 20, Seq: 1}})

	// The racing fetch: read epoch, then a real delivery of B.
	r.m.mu.Lock()
	p := r.m.parts[0]
	gen := p.c.Gen()
	r.m.mu.Unlock()
	var b jetstream.Msg
	waitFor(t, 10*time.Second, "B fetched", func() bool {
		batch, err := p.cons.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return false
		}
		for msg := range batch.Messages() {
			b = msg
		}
		return b != nil
	})
	// A's flush fails for good (five attempts with backoff).
	r.m.mu.Lock()
	r.m.enqueueLocked(r.m.dests["d"], "test")
	r.m.mu.Unlock()
	waitFor(t, 20*time.Second, "A's flush failed", func() bool {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		return p.c.Gen() > gen // the failure bumped the read epoch
	})
	// The raced read lands now.
	r.m.receiveGroup(context.Background(), p, []jetstream.Msg{b}, gen)
	r.m.mu.Lock()
	buffered := len(r.m.dests["d"].c.Live())
	r.m.enqueueLocked(r.m.dests["d"], "test")
	r.m.mu.Unlock()
	if !unsafe && buffered != 0 {
		t.Errorf("the raced read was buffered after the failure")
	}
	failing.Lock()
	fail = false
	failing.Unlock()
	if unsafe {
		waitFor(t, 10*time.Second, "B flushed", func() bool { return e.packed(t, "d")[2] == proto.Position{LSN: 20, Seq: 1} })
	}
	r.m.pauseFetch.Store(false)
	waitFor(t, 20*time.Second, "everything packed after redelivery", func() bool {
		r.m.mu.Lock()
		if d := r.m.dests["d"]; d != nil {
			r.m.enqueueLocked(d, "test")
		}
		r.m.mu.Unlock()
		return e.allPacked(t)
	})
	return v.get()
}

func TestFailureRuleWithRacingFetch(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out retry backoff")
	}
	if errs := failureScenario(t, false); len(errs) > 0 {
		t.Fatalf("cursor passed an unflushed change: %v", errs)
	}
}

// Negative control: with the epoch check, the live-buffer discard and the
// pending floor switched off, the raced read of B is flushed while A is away
// and the cursor passes A.
func TestNegativeControlFailureRule(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out retry backoff")
	}
	if errs := failureScenario(t, true); len(errs) == 0 {
		t.Fatal("negative control: the cursor never passed the nak'd change")
	}
}

// A replica that lost its partition lease (a zombie) can neither write the
// cursor nor ack; the new owner flushes everything.
func zombieScenario(t *testing.T, noFence bool) (acked bool) {
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.Partitions = 1; c.Delivery.LeaseTTL = time.Hour })
	steal := func() {
		if _, err := e.pool.Exec(e.ctx, `UPDATE sluice.leases SET expires_at = now() WHERE name = $1`, PartitionLease(0)); err != nil {
			t.Error(err)
		}
		if _, ok, err := state.NewLeases(e.pool, "sluice").Acquire(e.ctx, PartitionLease(0), "thief", time.Hour); err != nil || !ok {
			t.Errorf("stealing: %v %v", ok, err)
		}
	}
	var zl state.Lease
	var r *running
	r = e.start(t, "zombie", func(m *Manager) {
		m.noAckFence = noFence
		m.beforeAck = func(string) { // lease lost between cursor write and ack
			m.mu.Lock()
			zl = m.parts[0].lease
			m.mu.Unlock()
			steal()
		}
	})
	e.publish(t, "d", []pt.Row{{ID: 1, LSN: 10, Seq: 1}})
	waitFor(t, 5*time.Second, "buffered", func() bool { return r.m.Status().BufferedRows == 1 })
	r.m.mu.Lock()
	r.m.enqueueLocked(r.m.dests["d"], "test")
	r.m.mu.Unlock()
	waitFor(t, 10*time.Second, "flush done", func() bool {
		return testutilValue(r.m, "ok")+testutilValue(r.m, "failed") > 0
	})
	// The zombie's later cursor write is refused by the fence.
	_, err := state.NewCursors(e.pool, "sluice").Advance(e.ctx, zl, "d", 0, proto.Position{LSN: 99})
	if !noFence && !errors.Is(err, state.ErrLeaseLost) {
		t.Errorf("zombie cursor write: got %v, want ErrLeaseLost", err)
	}
	pending, _ := e.ackPending(t, 0)
	return pending == 0
}

func TestLeaseLossZombieCannotAck(t *testing.T) {
	if zombieScenario(t, false) {
		t.Fatal("the zombie acked after losing its lease")
	}
}

func TestNegativeControlNoAckFence(t *testing.T) {
	if !zombieScenario(t, true) {
		t.Fatal("negative control: without the ack fence the zombie's ack should have gone through")
	}
}
