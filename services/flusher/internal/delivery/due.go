package delivery

import (
	"container/heap"
	"time"
)

// The interval trigger in O(due destinations): every live buffer is
// entered, when it starts (bufferedLocked), in a min-heap of start times;
// a tick pops only the entries at least a flush interval old. An entry is
// stale, and dropped when popped, once its buffer was swapped out or
// discarded, or its destination left memory (a later buffer has its own
// entry). A due buffer that cannot be queued at once (its partition still
// settling, the destination halted, held or flushing) waits in overdue,
// re-checked every tick until it is queued or gone, as every buffering
// destination was re-checked before; a flush that ends with a due backlog
// it could not queue puts it there too (commit, fail, worker).
//
// The memory watermark still walks every live buffer (the heap's entries
// and overdue), only while over budget.

// dueEntry is one live buffer: its destination and when it started.
type dueEntry struct {
	d     *dest
	since time.Time
}

// dueHeap orders entries by start time.
type dueHeap []dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].since.Before(h[j].since) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = dueEntry{}
	*h = old[:len(old)-1]
	return e
}

// liveSinceLocked reports whether since is still the start of d's live
// buffer and d the destination in memory under its name.
func (m *Manager) liveSinceLocked(d *dest, since time.Time) bool {
	return len(d.c.Live()) > 0 && d.liveSince.Equal(since) && m.dests[d.name] == d
}

// bufferStartedLocked enters d's new live buffer (started at d.liveSince).
func (m *Manager) bufferStartedLocked(d *dest) {
	heap.Push(&m.due, dueEntry{d, d.liveSince})
}

// overdueLocked keeps d, whose live buffer is due, for the next ticks
// unless it is queued or flushing (whose end re-checks it).
func (m *Manager) overdueLocked(d *dest) {
	if len(d.c.Live()) > 0 && !d.queued && d.c.Inflight() == nil {
		m.overdue[d] = d.liveSince
	}
}

// intervalLocked queues every live buffer at least a flush interval old;
// it visits the due entries and overdue, not every buffering destination.
func (m *Manager) intervalLocked(now time.Time) {
	for d, since := range m.overdue {
		m.evalVisits++
		if !m.liveSinceLocked(d, since) {
			delete(m.overdue, d)
			continue
		}
		switch {
		case settling(d.part, now):
		case now.Sub(since) >= m.dc.FlushInterval:
			m.enqueueLocked(d, "interval")
		case m.firstFlushLocked(d):
			m.enqueueLocked(d, "first")
		}
		if d.queued || d.c.Inflight() != nil {
			delete(m.overdue, d)
		}
	}
	for len(m.due) > 0 && now.Sub(m.due[0].since) >= m.dc.FlushInterval {
		e := heap.Pop(&m.due).(dueEntry)
		m.evalVisits++
		if !m.liveSinceLocked(e.d, e.since) {
			continue
		}
		if !settling(e.d.part, now) {
			m.enqueueLocked(e.d, "interval")
		}
		m.overdueLocked(e.d)
	}
}

// liveBuffersLocked returns every destination with a live buffer (for the
// memory watermark), each once.
func (m *Manager) liveBuffersLocked() []*dest {
	var out []*dest
	seen := make(map[*dest]bool, len(m.due)+len(m.overdue))
	add := func(d *dest, since time.Time) {
		if !seen[d] && m.liveSinceLocked(d, since) {
			seen[d] = true
			out = append(out, d)
		}
	}
	for _, e := range m.due {
		add(e.d, e.since)
	}
	for d, since := range m.overdue {
		add(d, since)
	}
	return out
}
