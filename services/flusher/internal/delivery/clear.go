package delivery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/sluice-cdc/sluice/proto"
)

// expandClear turns a table-wide clear (its one slice under
// proto.ClearAllDestinations, as the router sends it to every partition)
// into one slice per destination of partition p that this flusher knows:
// the ones in memory and every one with a persisted cursor (evicted, or
// never seen by this process), read in one statement. Each slice is the
// clear row itself, so each destination's buffer holds the clear at its
// place in that destination's stream, and the message is acked only once
// every one of those slices is committed (core: a message resolves when
// each of its slices does). A destination unknown here holds no row of
// the partition's stream before the clear, so it needs none: the router
// publishes a table-wide clear only once every earlier batch is on ROUTED
// (route.awaitEarlier), a partition expands it only once settled
// (heldClear), and a flush registers its destination's cursor row even
// when it advances no cursor (needsRegistration); so every earlier message
// of the partition is acked (its destination has a cursor row), tracked
// here (in memory), or in the same fetch (earlier: the destinations of the
// messages before it there). It returns (nil, nil) when there is no
// destination at all: the message is then acked by the caller.
func (m *Manager) expandClear(ctx context.Context, p *part, its []*item, earlier map[string]bool) ([]*item, error) {
	if len(its) != 1 || its[0].dest != proto.ClearAllDestinations {
		for _, it := range its {
			if it.dest == proto.ClearAllDestinations {
				return nil, fmt.Errorf("%w: a message mixes %q with other destinations", ErrBadMessage, proto.ClearAllDestinations)
			}
		}
		return its, nil
	}
	it := its[0]
	if err := onlyClears(it); err != nil {
		return nil, err
	}
	persisted, err := m.cursors.Load(ctx, p.id)
	if err != nil {
		return nil, fmt.Errorf("listing the destinations of partition %d for a clear of %s: %w", p.id, it.table, err)
	}
	names := make(map[string]bool, len(persisted))
	for n := range persisted {
		names[n] = true
	}
	m.mu.Lock()
	for n := range p.dests {
		names[n] = true
	}
	m.mu.Unlock()
	for n := range earlier {
		names[n] = true
	}
	if len(names) == 0 {
		return nil, nil
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	slices.Sort(sorted)
	it.m.slices = len(sorted)
	out := make([]*item, 0, len(sorted))
	per := max(it.bytes/int64(len(sorted)), 1)
	for _, n := range sorted {
		c := *it
		c.dest = n
		c.bytes = per
		c.slices = len(sorted)
		it.src.Retain()
		out = append(out, &c)
	}
	it.release()
	m.m.clearSlices.Add(float64(len(out)))
	m.log.Info("table cleared", "partition", p.id, "table", it.table, "position", it.first.String(), "destinations", len(out), "persisted", len(persisted), "in_fetch", len(earlier))
	return out, nil
}

// onlyClears checks that every row of a proto.ClearAllDestinations slice is
// a clear: any other row would have no destination.
func onlyClears(it *item) error {
	idx := it.src.Schema().FieldIndices(proto.ColOp)
	if len(idx) != 1 {
		return fmt.Errorf("%w: batch lacks %s", ErrBadMessage, proto.ColOp)
	}
	ops, ok := it.src.Column(idx[0]).(*array.Int8)
	if !ok {
		return fmt.Errorf("%w: %s is not int8", ErrBadMessage, proto.ColOp)
	}
	for i := int(it.lo); i < int(it.hi); i++ {
		if !proto.IsClear(ops.Value(i)) {
			return fmt.Errorf("%w: a row under %q is not a clear", ErrBadMessage, proto.ClearAllDestinations)
		}
	}
	return nil
}

// ackEmptyClear acks a table-wide clear that reached a partition without
// destinations: nothing of it is to be held.
func ackEmptyClear(its []*item) {
	for _, it := range its {
		it.release()
	}
	if len(its) > 0 {
		_ = its[0].m.msg.Ack()
	}
}

// heldClear is a table-wide clear received on a partition that is not
// settled yet: a dead owner's unacked messages before it may redeliver
// after it, to destinations this process does not know. It is expanded
// once the partition settles (releaseHeldClears). It counts in the
// consumer's ack-pending messages, so settle discounts it.
type heldClear struct {
	its []*item
	gen uint64
}

// isTableClear reports whether a parsed message is a table-wide clear.
func isTableClear(its []*item) bool {
	return len(its) == 1 && its[0].dest == proto.ClearAllDestinations
}

// holdClearLocked holds a table-wide clear until p settles; a redelivery
// of a clear already held replaces it (the consumer counts it once).
func holdClearLocked(p *part, its []*item, gen uint64) {
	seq := its[0].seq
	for i, h := range p.heldClears {
		if h.its[0].seq == seq {
			for _, it := range h.its {
				it.release()
			}
			p.heldClears[i] = heldClear{its: its, gen: gen}
			return
		}
	}
	p.heldClears = append(p.heldClears, heldClear{its: its, gen: gen})
}

// releaseHeldClears expands and receives the clears p held while it was
// not settled, once it is.
func (m *Manager) releaseHeldClears(ctx context.Context, p *part) {
	m.mu.Lock()
	if len(p.heldClears) == 0 || !p.c.Seeded() || p.c.Lost() {
		m.mu.Unlock()
		return
	}
	held := p.heldClears
	p.heldClears = nil
	m.mu.Unlock()
	for _, h := range held {
		m.receiveClear(ctx, p, h.its, h.gen, nil)
	}
}

// receiveClear expands a table-wide clear and gives its slices to the core.
func (m *Manager) receiveClear(ctx context.Context, p *part, parsed []*item, gen uint64, earlier map[string]bool) {
	its, err := m.expandClear(ctx, p, parsed, earlier)
	if err != nil {
		for _, it := range parsed {
			it.release()
		}
		msg := parsed[0].m.msg
		if errors.Is(err, ErrBadMessage) {
			m.deadLetter(ctx, msg, err)
		} else {
			m.log.Warn("expanding a clear; the message will be redelivered", "partition", p.id, "error", err)
			_ = msg.NakWithDelay(time.Second)
		}
		return
	}
	if its == nil {
		ackEmptyClear(parsed)
		return
	}
	if !m.loadCursors(ctx, p, [][]*item{its}) {
		return
	}
	m.receiveItems(p, its, gen)
}

// dropHeldClearsLocked releases the clears a lost partition held, unacked:
// they redeliver to the next owner.
func dropHeldClearsLocked(p *part) {
	for _, h := range p.heldClears {
		for _, it := range h.its {
			it.release()
		}
	}
	p.heldClears = nil
}

// needsRegistration reports whether a flush of d must write d's cursor row
// although it advances no cursor (an unsettled partition writes none): a
// destination whose rows are acked must be findable by a table-wide clear
// after it leaves memory (evicted, or the partition moved to another
// owner), and only a cursor row outlives memory. The row is written at the
// zero position, which claims no prefix. Called under Manager.mu.
func needsRegistration(d *dest) bool {
	return !d.registered && d.c.Cursor() == (proto.Position{})
}
