package delivery

import (
	"context"
	"fmt"
	"slices"

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
// the partition's stream before the clear, so it needs none. It returns
// its (nil, nil) when there is no destination at all: the message is then
// acked by the caller.
func (m *Manager) expandClear(ctx context.Context, p *part, its []*item) ([]*item, error) {
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
		it.rec.Retain()
		out = append(out, &c)
	}
	it.rec.Release()
	m.m.clearSlices.Add(float64(len(out)))
	return out, nil
}

// onlyClears checks that every row of a proto.ClearAllDestinations slice is
// a clear: any other row would have no destination.
func onlyClears(it *item) error {
	idx := it.rec.Schema().FieldIndices(proto.ColOp)
	if len(idx) != 1 {
		return fmt.Errorf("%w: batch lacks %s", ErrBadMessage, proto.ColOp)
	}
	ops, ok := it.rec.Column(idx[0]).(*array.Int8)
	if !ok {
		return fmt.Errorf("%w: %s is not int8", ErrBadMessage, proto.ColOp)
	}
	for i := range ops.Len() {
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
		it.rec.Release()
	}
	if len(its) > 0 {
		_ = its[0].m.msg.Ack()
	}
}
