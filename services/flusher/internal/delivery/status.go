package delivery

import (
	"sort"
	"time"

	"github.com/sluice-cdc/sluice/shared/state"
)

// Destination states.
const (
	StateHealthy   = "healthy"   // nothing buffered
	StateBuffering = "buffering" // buffered, within the flush interval
	StateFlushing  = "flushing"  // a flush is in flight
	StateLagging   = "lagging"   // buffered longer than the flush interval, or rewound after a failure
	StateHalted    = "halted"    // a permanent failure stopped it
)

// DestinationStatus is one destination's state.
type DestinationStatus struct {
	Destination   string  `json:"destination"`
	Partition     int     `json:"partition"`
	State         string  `json:"state"`
	BufferedRows  int64   `json:"buffered_rows"`
	BufferedBytes int64   `json:"buffered_bytes"`
	Cursor        string  `json:"cursor"`
	LastPack      string  `json:"last_pack,omitempty"`
	LastError     string  `json:"last_error,omitempty"`
	AgeSeconds    float64 `json:"age_seconds"`
	// HeldMessages are the destination's messages its partition's consumer
	// counts as ack-pending: buffered, in flight, or nak'd awaiting
	// redelivery (a paused destination's grow while it is paused).
	HeldMessages int `json:"held_messages"`
}

// Status is the flusher's state.
type Status struct {
	ID              string              `json:"id"`
	Members         int                 `json:"members"`
	OwnedPartitions []int               `json:"owned_partitions"`
	Destinations    []DestinationStatus `json:"destinations"`
	BufferedRows    int64               `json:"buffered_rows"`
	BufferedBytes   int64               `json:"buffered_bytes"`
	MemoryBudget    int64               `json:"memory_budget"`
	RowsTarget      int64               `json:"rows_target"`
	Queued          int                 `json:"queued"`
	States          map[string]int      `json:"states"`
}

func (m *Manager) stateLocked(d *dest, now time.Time) string {
	switch {
	case d.lc == state.Retired: // lifecycle states (lifecycle.go)
		return StateRetired
	case d.c.Halted():
		return StateHalted
	case d.lc == state.Paused || d.lc == state.Draining || d.lc == state.Drained:
		return string(d.lc)
	case d.c.Inflight() != nil:
		return StateFlushing
	case d.lastErr != "" || (len(d.c.Live()) > 0 && now.Sub(d.liveSince) > m.dc.FlushInterval):
		return StateLagging
	case len(d.c.Live()) > 0:
		return StateBuffering
	}
	return StateHealthy
}

// Status returns a snapshot; it is one pass over the destinations under
// the lock (about a millisecond for 10,000 destinations).
func (m *Manager) Status() Status {
	now := time.Now()
	m.mu.Lock()
	st := Status{ID: m.id, Members: m.members, BufferedRows: m.totalRows, BufferedBytes: m.totalBytes,
		MemoryBudget: int64(m.dc.MemoryBudget), RowsTarget: m.rowsTarget, Queued: len(m.queue),
		States: map[string]int{}, Destinations: make([]DestinationStatus, 0, len(m.dests))}
	for id := range m.parts {
		st.OwnedPartitions = append(st.OwnedPartitions, id)
	}
	for _, d := range m.dests {
		ds := DestinationStatus{Destination: d.name, Partition: d.part.id, State: m.stateLocked(d, now),
			BufferedRows: d.liveRows, BufferedBytes: d.liveBytes, Cursor: d.c.Cursor().String(),
			LastPack: d.lastPack, LastError: d.lastErr, HeldMessages: d.c.Pending()}
		if f := d.c.Inflight(); f != nil {
			for _, it := range f.Items {
				ds.BufferedRows += it.rows
				ds.BufferedBytes += it.bytes
			}
		}
		if len(d.c.Live()) > 0 {
			ds.AgeSeconds = now.Sub(d.liveSince).Seconds()
		}
		if d.c.Halted() {
			ds.LastError = d.haltErr.Error()
		}
		st.States[ds.State]++
		st.Destinations = append(st.Destinations, ds)
	}
	m.mu.Unlock()
	sort.Ints(st.OwnedPartitions)
	sort.Slice(st.Destinations, func(i, j int) bool { return st.Destinations[i].Destination < st.Destinations[j].Destination })
	return st
}

// Summary is Status with only the halted destinations in Destinations and
// no States: what a periodic sampler or `sluice wait` polls, without
// building, sending and parsing every destination's status (at 10,000
// destinations the full status every 200 ms was 2 MB of JSON per poll).
func (m *Manager) Summary() Status {
	now := time.Now()
	m.mu.Lock()
	st := Status{ID: m.id, Members: m.members, BufferedRows: m.totalRows, BufferedBytes: m.totalBytes,
		MemoryBudget: int64(m.dc.MemoryBudget), RowsTarget: m.rowsTarget, Queued: len(m.queue),
		Destinations: []DestinationStatus{}}
	for id := range m.parts {
		st.OwnedPartitions = append(st.OwnedPartitions, id)
	}
	for _, d := range m.dests {
		if d.c.Halted() {
			st.Destinations = append(st.Destinations, DestinationStatus{Destination: d.name, Partition: d.part.id,
				State: m.stateLocked(d, now), Cursor: d.c.Cursor().String(), LastPack: d.lastPack, LastError: d.haltErr.Error(),
				HeldMessages: d.c.Pending()})
		}
	}
	m.mu.Unlock()
	sort.Ints(st.OwnedPartitions)
	sort.Slice(st.Destinations, func(i, j int) bool { return st.Destinations[i].Destination < st.Destinations[j].Destination })
	return st
}

func (m *Manager) updateGaugesLocked() {
	now := time.Now()
	m.m.bufferedRows.Set(float64(m.totalRows))
	m.m.bufferedBytes.Set(float64(m.totalBytes))
	counts := map[string]int{StateHealthy: 0, StateBuffering: 0, StateFlushing: 0, StateLagging: 0, StateHalted: 0,
		StatePaused: 0, StateDraining: 0, StateDrained: 0, StateRetired: 0}
	var oldest time.Duration
	pending := 0
	for _, d := range m.dests {
		counts[m.stateLocked(d, now)]++
		if len(d.c.Live()) > 0 {
			oldest = max(oldest, now.Sub(d.liveSince))
		}
		pending += d.c.Pending()
	}
	for s, n := range counts {
		m.m.destinations.WithLabelValues(s).Set(float64(n))
	}
	m.m.oldestBuffer.Set(oldest.Seconds())
	m.m.cursorLag.Set(float64(pending))
}

// Resume clears a halted destination so its redelivered messages flush
// again (after the operator fixed the cause). It reports whether it was
// halted.
func (m *Manager) Resume(destination string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.dests[destination]
	if !ok || !d.c.Resume() {
		return false
	}
	d.haltErr = nil
	d.lastErr = ""
	return true
}
