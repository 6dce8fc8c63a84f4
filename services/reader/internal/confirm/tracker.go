package confirm

import (
	"errors"
	"sync"
)

// ErrUnknownTicket is returned when a ticket is acked twice or was never
// issued by this tracker.
var ErrUnknownTicket = errors.New("unknown or already acked ticket")

// Ticket identifies one registered message.
type Ticket uint64

type entry struct {
	through uint64
	acked   bool
}

// Tracker is safe for concurrent use.
type Tracker struct {
	mu        sync.Mutex
	base      Ticket  // ticket of entries[0]
	entries   []entry // registered, not yet part of the acked prefix, publish order
	confirmed uint64
	maxAcked  uint64

	// scalarMax switches the rule off (confirmed = max acked through): the
	// defect the negative-control tests demonstrate. Never set in production.
	scalarMax bool
}

// New returns a tracker whose confirmed LSN starts at start (the slot's
// confirmed_flush_lsn or the replication start point).
func New(start uint64) *Tracker { return &Tracker{confirmed: start, maxAcked: start} }

// SetScalarMaxForTest switches the tracker to the broken scalar-max rule.
// Only tests call it, to show that they fail without prefix completeness.
func (t *Tracker) SetScalarMaxForTest(on bool) {
	t.mu.Lock()
	t.scalarMax = on
	t.mu.Unlock()
}

// Add registers the next message in publish order with the LSN it makes
// durable.
func (t *Tracker) Add(through uint64) Ticket {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entries = append(t.entries, entry{through: through})
	return t.base + Ticket(len(t.entries)-1)
}

// Ack marks a message stored and returns the confirmed LSN after it.
func (t *Tracker) Ack(tk Ticket) (uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tk < t.base || tk >= t.base+Ticket(len(t.entries)) {
		return t.confirmed, ErrUnknownTicket
	}
	e := &t.entries[tk-t.base]
	if e.acked {
		return t.confirmed, ErrUnknownTicket
	}
	e.acked = true
	if e.through > t.maxAcked {
		t.maxAcked = e.through
	}
	n := 0
	for n < len(t.entries) && t.entries[n].acked {
		if th := t.entries[n].through; th > t.confirmed {
			t.confirmed = th
		}
		n++
	}
	if n > 0 {
		t.entries = append(t.entries[:0], t.entries[n:]...)
		t.base += Ticket(n)
	}
	if t.scalarMax && t.maxAcked > t.confirmed {
		t.confirmed = t.maxAcked
	}
	return t.confirmed, nil
}

// Confirmed is the LSN every message at or below which is stored.
func (t *Tracker) Confirmed() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confirmed
}

// Pending is the number of registered messages not yet in the acked prefix.
func (t *Tracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}
