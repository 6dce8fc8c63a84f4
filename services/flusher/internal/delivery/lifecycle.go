package delivery

// Destination lifecycle (`sluice destinations pause|resume|drain|retire`):
// operator-set states in the state database (state.DestinationStates),
// polled every destinations.state_poll into a lock-free cache and applied
// to each destination under Manager.mu.
//
//   - paused, drained: messages are received and buffered (kept alive by
//     the in-progress acks) but never flushed. A held buffer stops growing
//     at the size that would trigger a flush (rows or bytes), or at a
//     quarter of MaxAckPending slices; further slices are nak'd (their
//     message with a long delay, once its other slices are resolved: the
//     other destinations then flush it again on redelivery) and stay in
//     the destination's pending set (marked naked), so its cursor can
//     never pass them. Under memory pressure held
//     buffers are nak'd the same way (heldEvict). A held destination keeps
//     its messages ack-pending on its partition's consumer, and so holds
//     the partition's ack floor and the snapshot frontier (through_lsn):
//     its copy is not up to date, and a snapshot must not say it is.
//   - draining: its buffer is flushed now, and again whenever it has
//     something; once nothing is buffered or in flight the owner of its
//     partition writes drained (the draining -> drained transition is the
//     only fence it needs).
//   - retired: what is buffered is flushed once, then every further slice
//     is done at once and discarded (counted), also over a halt; its
//     message is acked once its other slices are committed. Discarded
//     slices leave the pending set, so they never hold the cursor or the
//     partition's ack floor.
//   - active (resumed): flushed on the normal schedule again; a buffer
//     older than the flush interval flushes at the next evaluation.
//
// Until the first load of the states succeeds the manager does not start
// (Run retries it): a paused destination must never be flushed because its
// state was not known yet.

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/state"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// Lifecycle states as DestinationStatus.State shows them; they win over
// the flush states (halted excepted, which wins over all but retired).
const (
	StatePaused   = string(state.Paused)
	StateDraining = string(state.Draining)
	StateDrained  = string(state.Drained)
	StateRetired  = string(state.Retired)
)

type lifecycleMetrics struct {
	retired  prometheus.Counter
	heldNaks prometheus.Counter
}

func newLifecycleMetrics(reg prometheus.Registerer) *lifecycleMetrics {
	m := &lifecycleMetrics{
		retired:  telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_retired_messages_total", Help: "Destination slices of ROUTED messages discarded because their destination is retired."})),
		heldNaks: telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_held_naks_total", Help: "Destination slices of paused or drained destinations nak'd (with a long delay) because their buffer is full or memory is short."})),
	}
	return m
}

// heldLocked reports whether d must not be flushed (paused or drained).
func (m *Manager) heldLocked(d *dest) bool {
	return !m.noPauseCheck && d.lc.Holds()
}

// flushNowLocked reports whether d's buffer flushes as soon as it has one
// (draining, or the last flush of a retired destination).
func (m *Manager) flushNowLocked(d *dest) bool {
	return d.lc == state.Draining || d.lc == state.Retired
}

// firstFlushLocked reports whether d's buffer flushes as soon as it has
// one because d was never flushed (no cursor row yet: needsRegistration):
// a new destination's first rows reach a pack within a trigger tick, not
// a flush interval later, so the first snapshot of a new pipeline, or a
// new tenant's first rows, are published seconds after the change (issue
// 37: the demo's first snapshot waited a whole delivery.flush_interval
// after its backfill). It costs one more, small, pack per destination in
// its lifetime, never one per interval: once flushed, d follows the
// normal schedule. A settling partition's destinations wait for it to
// settle (the interval trigger re-checks them), as interval flushes do.
func (m *Manager) firstFlushLocked(d *dest) bool {
	return !m.noFirstFlush && needsRegistration(d)
}

// heldDelay is the nak delay of a held destination's surplus messages:
// max(flush_interval, 30s), plus up to a quarter of jitter.
func (m *Manager) heldDelay() time.Duration {
	d := max(m.dc.FlushInterval, 30*time.Second)
	if m.heldNakDelay > 0 {
		d = m.heldNakDelay
	}
	return d + rand.N(d/4+1)
}

// heldFullLocked reports whether a held destination's buffer is at the
// size that would have triggered a flush.
func (m *Manager) heldFullLocked(d *dest) bool {
	return d.liveRows >= m.rowsTarget || d.liveBytes >= int64(m.dc.FlushBytes) ||
		len(d.c.Live()) >= max(m.dc.MaxAckPending/4, 1)
}

// lifecycleReceiveLocked applies d's lifecycle to a received slice (the
// core's Receive hook): retired, the slice is done at once (discarded; the
// message is acked once its other slices are committed); held and full,
// it is nak'd (the core keeps it pending, so a later flush's cursor cannot
// pass it). Otherwise (core.Buffer) the core buffers it.
func (m *Manager) lifecycleReceiveLocked(d *dest, it *item) core.Verdict {
	switch {
	case d.lc == state.Retired:
		m.lcm.retired.Inc()
		return core.Retired
	case m.heldLocked(d) && m.heldFullLocked(d):
		it.m.delay = max(it.m.delay, m.heldDelay())
		m.lcm.heldNaks.Inc()
		return core.NakHeld
	}
	return core.Buffer
}

// heldEvictLocked nak's held buffers, largest first, when they take more
// than half the memory budget, until they take less than a quarter: a
// paused destination must not starve the others of memory.
func (m *Manager) heldEvictLocked() {
	if m.noPauseCheck {
		return
	}
	var held []*dest
	var bytes int64
	for _, d := range m.dests {
		if d.lc.Holds() && len(d.c.Live()) > 0 {
			held = append(held, d)
			bytes += d.liveBytes
		}
	}
	budget := int64(m.dc.MemoryBudget)
	if bytes < budget/2 {
		return
	}
	slices.SortFunc(held, func(a, b *dest) int { return int(b.liveBytes - a.liveBytes) })
	for _, d := range held {
		if bytes < budget/4 {
			break
		}
		bytes -= d.liveBytes
		evicted, res := d.c.EvictLive()
		for _, it := range evicted {
			it.m.delay = max(it.m.delay, m.heldDelay())
			m.releaseItemLocked(it)
			m.lcm.heldNaks.Inc()
		}
		m.resolveLocked(res)
		d.liveRows, d.liveBytes = 0, 0
		m.log.Warn("memory short: a held destination's buffer was nak'd for redelivery", "destination", d.name, "state", string(d.lc))
	}
}

// setLifecycleLocked moves d to st and schedules what st needs now.
func (m *Manager) setLifecycleLocked(d *dest, st state.DestinationState) {
	if d.lc == st {
		return
	}
	d.lc = st
	switch st {
	case state.Draining:
		m.enqueueLocked(d, "drain")
	case state.Retired:
		m.enqueueLocked(d, "retire")
	}
}

// applyStates is the cache's change callback.
func (m *Manager) applyStates(changed map[string]state.DestinationState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, st := range changed {
		if d, ok := m.dests[name]; ok {
			m.setLifecycleLocked(d, st)
		}
	}
	m.updateGaugesLocked()
}

// lifecycleTick flushes draining buffers that filled since the last tick
// and returns the draining destinations of owned partitions that have
// nothing buffered or in flight: they are drained.
func (m *Manager) lifecycleTick() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var done []string
	for name, st := range m.lc.All() {
		if st != state.Draining {
			continue
		}
		d, ok := m.dests[name]
		if !ok {
			// Nothing of it was ever received here: drained at once if
			// this replica owns its partition.
			if p, owned := m.parts[proto.Partition(name, m.dc.Partitions)]; owned && !p.c.Lost() && p.c.Seeded() {
				done = append(done, name)
			}
			continue
		}
		if d.part.c.Lost() || d.c.Halted() {
			continue
		}
		if len(d.c.Live()) > 0 {
			m.enqueueLocked(d, "drain")
			continue
		}
		if d.c.Inflight() == nil && !d.queued {
			done = append(done, name)
		}
	}
	return done
}

// lifecycle polls the states every destinations.state_poll (the cache's
// Run) until ctx ends; after each poll that succeeded, markDrained.
func (m *Manager) lifecycle(ctx context.Context) {
	_ = m.lc.Run(ctx, m.cfg.Destinations.StatePoll)
}

// markDrained writes drained for the destinations whose drain finished.
func (m *Manager) markDrained(ctx context.Context) {
	for _, name := range m.lifecycleTick() {
		_, err := m.states.Set(ctx, name, state.Drained, "drained by flusher "+m.id)
		switch {
		case err == nil:
			m.log.Info("destination drained", "destination", name)
			m.mu.Lock()
			if d, ok := m.dests[name]; ok && d.lc == state.Draining {
				d.lc = state.Drained
			}
			m.mu.Unlock()
		case state.IsRefused(err): // resumed or retired meanwhile
		case ctx.Err() == nil:
			m.log.Warn("marking destination drained", "destination", name, "error", err)
		}
	}
}

// startLifecycle loads the states once (retrying until it succeeds or ctx
// ends) so no destination is flushed before its state is known. It
// reports whether the manager may start.
func (m *Manager) startLifecycle(ctx context.Context) bool {
	if m.states == nil {
		return true
	}
	m.lc = state.NewDestinationCache(m.states, m.log)
	m.lc.OnChange(m.applyStates)
	m.lc.OnRefresh(m.markDrained)
	for attempt := 1; ; attempt++ {
		err := m.lc.Refresh(ctx)
		if err == nil {
			return true
		}
		if attempt == 1 {
			m.log.Warn("loading destination states; retrying before consuming", "error", err)
		}
		if !natsx.Sleep(ctx, natsx.Backoff(min(attempt, 7))) { // at most [3.2 s, 6.4 s)
			return false
		}
	}
}
