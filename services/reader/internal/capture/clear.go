package capture

import (
	"context"
	"fmt"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
)

// EmitClear publishes a clear (proto.OpClear) of table at bound: every row
// of the table below bound is hidden in each snapshot that holds the
// clear, in every destination (routingValue nil) or in the one destination
// of *routingValue. It must be called from the session's goroutine, in
// stream order: the table's rows received so far are published first, so
// the clear follows them on CHANGES and, through the router, in each
// destination's stream. The clear is one message of its own (one row at
// bound, every column NULL but a scoped clear's routing column), with an id
// of its own (proto.ClearMsgID), so a replay republishes the same message.
// A TRUNCATE's bound is its own position; a resync's is its first low
// watermark, older than the rows it copied.
func (s *session) EmitClear(ctx context.Context, table string, routingValue *string, bound proto.Position) error {
	t := s.tables[table]
	if t == nil {
		return fmt.Errorf("clearing %s: not a captured table", table)
	}
	if t.halted {
		return nil // a halted table carries nothing until it is resynced
	}
	if t.schema == nil {
		return fmt.Errorf("%w: clear of %s before its Relation message", ErrReplication, table)
	}
	if err := s.cut(ctx, t, s.clean); err != nil {
		return err
	}
	sc := t.schema
	r := batch.Row{Op: proto.OpClear, Pos: bound, CommitTime: s.txTime}
	r.Kinds = make([]byte, len(sc.Columns))
	r.Values = make([][]byte, len(sc.Columns))
	for i := range r.Kinds {
		r.Kinds[i] = batch.Null
	}
	scope := ""
	if routingValue != nil {
		name, err := proto.DestinationName(*routingValue)
		if err != nil {
			return fmt.Errorf("clearing %s for routing value %q: %w", table, *routingValue, err)
		}
		scope = name
		r.Kinds[sc.RoutingIdx], r.Values[sc.RoutingIdx] = batch.Text, []byte(*routingValue)
	}
	b := batch.NewBuilder(s.o.Mem, sc, s.o.Append)
	defer b.Release()
	if err := b.Append(&r); err != nil {
		return fmt.Errorf("building the clear of %s: %w", table, err)
	}
	rec := b.Cut()
	defer rec.Release()
	parts, err := encodeParts(rec, 0, s.o.Metrics)
	if err != nil {
		return fmt.Errorf("encoding the clear of %s: %w", table, err)
	}
	o := batchOut(table, sc.Fingerprint, bound, bound, s.clean, 1, parts[0].body)
	o.ID = proto.ClearMsgID(table, scope, bound)
	o.Msg.Header.Set(proto.HeaderMsgID, o.ID)
	o.Span = s.span(o)
	if err := s.send(ctx, o); err != nil {
		return err
	}
	s.o.Metrics.Clears.Inc()
	return nil
}
