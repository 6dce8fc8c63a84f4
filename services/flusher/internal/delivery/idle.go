package delivery

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// Bounded per-destination state: a destination with nothing buffered,
// pending or in flight for delivery.idle_evict is dropped from memory (the
// shell's dest and the core's, core.Partition.Forget); when it reappears
// its cursor is reloaded from the state database, for every new
// destination of a group of fetched messages in one statement
// (loadCursors). So the destinations in memory, and the periodic work over
// them (trigger evaluation, gauges, status), are the recently active ones,
// not every one ever seen. A halted destination is kept (its halt must
// outlive it), as is a held one with a buffer.

type idleMetrics struct {
	evicted, loads prometheus.Counter
}

func newIdleMetrics(reg prometheus.Registerer) *idleMetrics {
	m := &idleMetrics{
		evicted: telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_destinations_evicted_total", Help: "Idle destinations dropped from the flusher's memory (delivery.idle_evict)."})),
		loads:   telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_flusher_cursor_loads_total", Help: "Statements loading the cursors of destinations new to the flusher's memory (one per group of fetched messages)."})),
	}
	return m
}

// sweepIdleLocked evicts the destinations idle for delivery.idle_evict; it
// runs at most every quarter of it (and at least every 10 s). Over the
// memory budget (destinations count destOverhead each) it runs at most
// every second and evicts every idle destination whatever its idle time.
func (m *Manager) sweepIdleLocked(now time.Time) {
	every := min(max(m.dc.IdleEvict/4, 10*time.Millisecond), 10*time.Second)
	pressed := m.dc.IdleEvict > 0 && m.overBudgetLocked()
	if pressed {
		every = min(every, time.Second)
	}
	if m.dc.IdleEvict <= 0 || now.Sub(m.lastSweep) < every {
		return
	}
	m.lastSweep = now
	for name, d := range m.dests {
		busy := len(d.c.Live()) > 0 || d.c.Inflight() != nil || d.queued || d.c.Pending() > 0 || d.c.Halted()
		switch {
		case busy:
			d.idleSince = time.Time{}
		case d.idleSince.IsZero() && !pressed:
			d.idleSince = now
		case (pressed || now.Sub(d.idleSince) >= m.dc.IdleEvict) && !d.part.c.Lost() && d.part.c.Forget(name):
			delete(d.part.dests, name)
			delete(m.dests, name)
			m.im.evicted.Inc()
		}
	}
}

// loadCursors gives p's core the persisted cursors of the destinations of
// a group of fetched messages it does not hold yet (new, or evicted
// since), in one statement. A destination without a cursor is loaded at
// the zero position. On an error the group is not received: its messages
// are nak'd and redeliver.
func (m *Manager) loadCursors(ctx context.Context, p *part, groups [][]*item) bool {
	m.mu.Lock()
	var names []string
	seen := map[string]bool{}
	for _, its := range groups {
		for _, it := range its {
			if !seen[it.dest] && !p.c.Holds(it.dest) {
				seen[it.dest] = true
				names = append(names, it.dest)
			}
		}
	}
	m.mu.Unlock()
	if len(names) == 0 {
		return true
	}
	loaded, err := m.cursors.LoadSome(ctx, p.id, names)
	if err != nil {
		m.log.Warn("loading cursors; the fetched messages will be redelivered", "partition", p.id, "destinations", len(names), "error", err)
		for _, its := range groups {
			for _, it := range its {
				it.release()
			}
			if len(its) > 0 {
				_ = its[0].m.msg.NakWithDelay(time.Second)
			}
		}
		return false
	}
	for _, n := range names {
		if _, ok := loaded[n]; !ok {
			loaded[n] = proto.Position{}
		}
	}
	m.mu.Lock()
	p.c.Load(loaded)
	m.mu.Unlock()
	m.im.loads.Inc()
	return true
}

// receiveGroup receives msgs, fetched together: parsed (a bad one
// dead-lettered), the cursors of their new destinations loaded in one
// statement, then each message's slices given to the core.
func (m *Manager) receiveGroup(ctx context.Context, p *part, msgs []jetstream.Msg, gen uint64) {
	groups := make([][]*item, 0, len(msgs))
	for _, msg := range msgs {
		its, err := m.parse(ctx, p, msg)
		if err != nil {
			m.deadLetter(ctx, msg, err)
			continue
		}
		if isTableClear(its) {
			// A clear after the messages before it in this fetch: those are
			// received first, then the clear is expanded knowing their
			// destinations; on an unsettled partition it waits (heldClear).
			earlier := map[string]bool{}
			for _, g := range groups {
				for _, it := range g {
					earlier[it.dest] = true
				}
			}
			if len(groups) > 0 {
				if !m.loadCursors(ctx, p, groups) {
					for _, it := range its {
						it.release()
					}
					_ = msg.NakWithDelay(time.Second)
					return
				}
				for _, g := range groups {
					m.receiveItems(p, g, gen)
				}
				groups = groups[:0]
			}
			m.mu.Lock()
			hold := !p.c.Seeded()
			if hold {
				holdClearLocked(p, its, gen)
			}
			m.mu.Unlock()
			if !hold {
				m.receiveClear(ctx, p, its, gen, earlier)
			}
			continue
		}
		groups = append(groups, its)
	}
	if !m.loadCursors(ctx, p, groups) {
		return
	}
	for _, its := range groups {
		m.receiveItems(p, its, gen)
	}
}
