package delivery

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/proto"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
	"github.com/sluice-cdc/sluice/shared/state"
)

// lifecycleEnv: one partition (every destination shares it), a short
// flush interval and state poll, a held buffer that is full at 5 rows.
func lifecycleEnv(t *testing.T) (*env, *state.DestinationStates) {
	e := newEnv(t, func(c *cfgpkg.Config) {
		c.Delivery.Partitions = 1
		c.Delivery.FlushInterval = 200 * time.Millisecond
		c.Delivery.FlushRows = 5
		c.Destinations.StatePoll = 50 * time.Millisecond
	})
	return e, state.NewDestinationStates(e.pool, e.cfg.State.Schema)
}

func (e *env) startLifecycle(t *testing.T, ds *state.DestinationStates, knobs func(*Manager)) *running {
	return e.start(t, "lc", func(m *Manager) {
		m.states = ds
		m.heldNakDelay = time.Second
		if knobs != nil {
			knobs(m)
		}
	})
}

func setState(t *testing.T, e *env, ds *state.DestinationStates, dest string, to state.DestinationState) {
	t.Helper()
	if _, err := ds.Set(e.ctx, dest, to, "test"); err != nil {
		t.Fatal(err)
	}
}

func destStatus(m *Manager, name string) DestinationStatus {
	for _, d := range m.Status().Destinations {
		if d.Destination == name {
			return d
		}
	}
	return DestinationStatus{}
}

// flushRound publishes one row for dest and waits until its cursor has
// it: one flush interval has passed for every destination of the
// partition.
func flushRound(t *testing.T, e *env, dest string, lsn uint64) {
	t.Helper()
	e.publish(t, dest, []pt.Row{{ID: int64(lsn), LSN: lsn, Seq: 1}})
	waitFor(t, 10*time.Second, dest+" flushed", func() bool { return e.cursor(t, dest) == proto.Position{LSN: proto.LSN(lsn), Seq: 1} })
}

// pausedScenario pauses "pa" ahead of time (it has never been seen), sends
// it more rows than a held buffer keeps, and lets "ok" (same partition)
// flush several times. It returns an error when "pa" was flushed; other
// failures fail t.
func pausedScenario(t *testing.T, noPauseCheck bool, knobs ...func(*Manager)) (*env, *running, error) {
	e, ds := lifecycleEnv(t)
	setState(t, e, ds, "pa", state.Paused)
	r := e.startLifecycle(t, ds, func(m *Manager) {
		m.noPauseCheck = noPauseCheck
		for _, k := range knobs {
			k(m)
		}
	})
	// Five rows fill the held buffer; three more, at LOWER positions (as
	// another router may publish them), are nak'd and stay pending.
	for i := range 5 {
		e.publish(t, "pa", []pt.Row{{ID: int64(i), LSN: 100 + uint64(i), Seq: 1}})
	}
	for i := range 3 {
		e.publish(t, "pa", []pt.Row{{ID: int64(10 + i), LSN: 50 + uint64(i), Seq: 1}})
	}
	for round := range 4 {
		flushRound(t, e, "ok", 200+uint64(round))
	}
	if n := len(e.packed(t, "pa")); n > 0 || !e.cursor(t, "pa").IsZero() {
		return e, r, fmt.Errorf("paused destination flushed: %d keys in packs, cursor %s", n, e.cursor(t, "pa"))
	}
	return e, r, nil
}

// A paused destination is buffered, never flushed, while another in its
// partition flushes every interval; its buffer stops growing at the flush
// threshold (the rest is nak'd); on resume it flushes, and its cursor
// never passes the nak'd messages, which redeliver and flush too.
func TestPausedDestinationIsNotFlushed(t *testing.T) {
	if err := pausedResumeScenario(t, false); err != nil {
		t.Fatal(err)
	}
}

// Negative control: when a held destination's surplus leaves the pending
// set, the resumed flush moves the cursor past the nak'd messages.
func TestHeldPendingNegativeControl(t *testing.T) {
	err := pausedResumeScenario(t, true)
	if err == nil {
		t.Fatal("with the nak'd surplus out of the pending set the cursor stayed prefix-complete: the test cannot catch it")
	}
	t.Logf("caught as expected: %v", err)
}

// pausedResumeScenario runs pausedScenario, checks the held buffer, resumes
// and returns the first prefix-completeness violation of the cursor.
func pausedResumeScenario(t *testing.T, noHeldPending bool) error {
	e, r, err := pausedScenario(t, false, func(m *Manager) {
		m.noHeldPending = noHeldPending
		if noHeldPending {
			// The nak'd messages must still be away when the resumed
			// buffer flushes, whatever the machine's speed.
			m.heldNakDelay = time.Hour
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var violations []error
	var vmu sync.Mutex
	st := destStatus(r.m, "pa")
	if st.State != StatePaused || st.BufferedRows != 5 || st.HeldMessages < 5 {
		t.Fatalf("paused status %+v: want paused, 5 rows buffered, >= 5 held", st)
	}
	waitFor(t, 10*time.Second, "surplus nak'd", func() bool { return testutil.ToFloat64(r.m.lcm.heldNaks) >= 3 })
	if st := destStatus(r.m, "pa"); st.BufferedRows != 5 {
		t.Fatalf("held buffer grew to %d rows", st.BufferedRows)
	}

	// Resume: flushed on the normal schedule, prefix-complete throughout.
	check := func() {
		if err := e.checkCursor(t, "pa", e.cursor(t, "pa")); err != nil {
			vmu.Lock()
			violations = append(violations, err)
			vmu.Unlock()
		}
	}
	ds := state.NewDestinationStates(e.pool, e.cfg.State.Schema)
	setState(t, e, ds, "pa", state.Active)
	waitFor(t, 10*time.Second, "buffer flushed after resume", func() bool {
		check()
		return !e.cursor(t, "pa").IsZero() // written after the pack
	})
	// Exactly the rule, against the rows in the store: a cursor at or past
	// the nak'd messages at 50..52 while they are in no segment is the
	// violation (they are away for an hour in the control).
	if err := e.checkCursor(t, "pa", e.cursor(t, "pa")); err != nil {
		return err
	}
	if noHeldPending {
		return nil // they are away for an hour
	}
	waitFor(t, 15*time.Second, "nak'd messages redelivered and flushed", func() bool {
		check()
		return e.allPacked(t) && e.cursor(t, "pa") == proto.Position{LSN: 104, Seq: 1}
	})
	if st := destStatus(r.m, "pa"); st.State == StatePaused {
		t.Fatalf("resumed destination still shows %s", st.State)
	}
	vmu.Lock()
	defer vmu.Unlock()
	if len(violations) > 0 {
		return violations[0]
	}
	return nil
}

// Negative control: with the pause check off, the same scenario flushes
// the paused destination.
func TestPausedNegativeControl(t *testing.T) {
	_, _, err := pausedScenario(t, true)
	if err == nil {
		t.Fatal("with the pause check off the paused destination was not flushed: the test cannot catch a broken pause")
	}
	t.Logf("caught as expected: %v", err)
}

// Drain: a paused destination's buffer is flushed within a poll and a
// flush, the state becomes drained (written by the partition's owner),
// and later rows are held again. A draining destination never seen here
// becomes drained at once.
func TestDrainFlushesThenHolds(t *testing.T) {
	e, ds := lifecycleEnv(t)
	setState(t, e, ds, "dr", state.Paused)
	r := e.startLifecycle(t, ds, nil)
	for i := range 3 {
		e.publish(t, "dr", []pt.Row{{ID: int64(i), LSN: 10 + uint64(i), Seq: 1}})
	}
	flushRound(t, e, "ok", 100)
	waitFor(t, 10*time.Second, "3 rows held", func() bool { return destStatus(r.m, "dr").BufferedRows == 3 })
	if !e.cursor(t, "dr").IsZero() {
		t.Fatal("paused destination flushed")
	}
	t0 := time.Now()
	setState(t, e, ds, "dr", state.Draining)
	setState(t, e, ds, "never-seen", state.Draining)
	stateOf := func(name string) state.DestinationState {
		rows, _, err := ds.Load(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Destination == name {
				return r.State
			}
		}
		return state.Active
	}
	waitFor(t, 10*time.Second, "drained", func() bool {
		return stateOf("dr") == state.Drained && stateOf("never-seen") == state.Drained
	})
	if c := e.cursor(t, "dr"); c != (proto.Position{LSN: 12, Seq: 1}) {
		t.Fatalf("drained with cursor %s, want 12/1", c)
	}
	t.Logf("drain to drained: %s", time.Since(t0))
	e.publish(t, "dr", []pt.Row{{ID: 9, LSN: 20, Seq: 1}})
	for round := range 3 {
		flushRound(t, e, "ok", 101+uint64(round))
	}
	if c := e.cursor(t, "dr"); c != (proto.Position{LSN: 12, Seq: 1}) {
		t.Fatalf("drained destination flushed again: cursor %s", c)
	}
	waitFor(t, 5*time.Second, "drained status", func() bool {
		st := destStatus(r.m, "dr")
		return st.State == StateDrained && st.BufferedRows == 1
	})
	// A drained destination can be resumed, and then flushes.
	setState(t, e, ds, "dr", state.Active)
	waitFor(t, 10*time.Second, "resumed drained flushes", func() bool { return e.cursor(t, "dr") == proto.Position{LSN: 20, Seq: 1} })
	// Drained -> paused is refused (pause a drained destination: resume first).
	if _, err := ds.Set(e.ctx, "never-seen", state.Paused, ""); !errors.Is(err, state.ErrTransition) {
		t.Fatalf("drained -> paused: %v", err)
	}
}

// Retire: what is buffered is flushed once; later messages are acked and
// dropped, so the partition's ack floor moves past them; the packs stay;
// other destinations are unaffected.
func TestRetireFlushesOnceThenDiscards(t *testing.T) {
	e, ds := lifecycleEnv(t)
	setState(t, e, ds, "rt", state.Paused)
	r := e.startLifecycle(t, ds, nil)
	for i := range 3 {
		e.publish(t, "rt", []pt.Row{{ID: int64(i), LSN: 10 + uint64(i), Seq: 1}})
	}
	waitFor(t, 10*time.Second, "3 rows held", func() bool { return destStatus(r.m, "rt").BufferedRows == 3 })
	setState(t, e, ds, "rt", state.Retired)
	waitFor(t, 10*time.Second, "buffer flushed once", func() bool { return len(e.packed(t, "rt")) == 3 })
	for i := range 4 {
		e.publish(t, "rt", []pt.Row{{ID: int64(100 + i), LSN: 30 + uint64(i), Seq: 1}})
	}
	flushRound(t, e, "ok", 200)
	waitFor(t, 10*time.Second, "later messages acked and dropped", func() bool {
		pending, _ := e.ackPending(t, 0)
		return testutil.ToFloat64(r.m.lcm.retired) == 4 && pending == 0
	})
	c, err := e.js.Consumer(e.ctx, proto.StreamRouted, proto.ConsumerFlusher(0))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream != info.Delivered.Stream {
		t.Fatalf("ack floor %d behind delivered %d", info.AckFloor.Stream, info.Delivered.Stream)
	}
	if got := e.packed(t, "rt"); len(got) != 3 {
		t.Fatalf("retired destination has %d keys in packs, want its 3 from before retirement", len(got))
	}
	if st := destStatus(r.m, "rt"); st.State != StateRetired || st.BufferedRows != 0 || st.HeldMessages != 0 {
		t.Fatalf("retired status %+v", st)
	}
	flushRound(t, e, "ok", 201)
	if _, err := ds.Set(e.ctx, "rt", state.Active, ""); !errors.Is(err, state.ErrRetired) {
		t.Fatalf("resuming a retired destination: %v", err)
	}
}

// Memory: held buffers that take over half the memory budget are nak'd
// back, so a paused destination cannot starve the others of memory (the
// fetch stops at the budget).
func TestHeldBuffersGiveMemoryBack(t *testing.T) {
	e := newEnv(t, func(c *cfgpkg.Config) {
		c.Delivery.Partitions = 1
		c.Delivery.FlushInterval = 200 * time.Millisecond
		c.Delivery.MemoryBudget = 96 << 10 // about 16 one-row messages
		c.Destinations.StatePoll = 50 * time.Millisecond
	})
	ds := state.NewDestinationStates(e.pool, e.cfg.State.Schema)
	setState(t, e, ds, "pa", state.Paused)
	r := e.startLifecycle(t, ds, nil)
	for i := range 60 {
		e.publish(t, "pa", []pt.Row{{ID: int64(i), LSN: 100 + uint64(i), Seq: 1}})
	}
	waitFor(t, 10*time.Second, "held buffer evicted", func() bool { return testutil.ToFloat64(r.m.lcm.heldNaks) > 0 })
	for round := range 3 {
		flushRound(t, e, "ok", 1000+uint64(round))
	}
	if !e.cursor(t, "pa").IsZero() || len(e.packed(t, "pa")) > 0 {
		t.Fatal("paused destination flushed")
	}
}

// TestHeldMessageKeptAlive: a message buffered past AckWait (its
// destination paused) is kept from redelivery by in-progress acks, sent
// once per message (keepAlive walks the messages held, not their slices).
func TestHeldMessageKeptAlive(t *testing.T) {
	if testing.Short() {
		t.Skip("waits past AckWait")
	}
	e, ds := lifecycleEnv(t)
	setState(t, e, ds, "pa", state.Paused)
	setState(t, e, ds, "pb", state.Paused)
	r := e.startLifecycle(t, ds, nil)
	// One message, two slices, both held.
	e.publishParts(t, destRows{"pa", []pt.Row{{ID: 1, LSN: 100, Seq: 1}}}, destRows{"pb", []pt.Row{{ID: 2, LSN: 101, Seq: 1}}})
	time.Sleep(AckWait(e.cfg.Delivery) + 2*time.Second)
	if pending, redelivered := e.ackPending(t, 0); redelivered != 0 || pending != 1 {
		t.Fatalf("held message: %d redelivered, %d ack pending; want 0, 1 (kept alive)", redelivered, pending)
	}
	if n := testutil.ToFloat64(r.m.m.inProgress); n < 1 {
		t.Fatalf("%v in-progress acks, want at least one", n)
	}
}
