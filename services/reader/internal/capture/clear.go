package capture

import (
	"context"
	"fmt"
	"time"

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
	if routingValue != nil {
		if _, err := proto.DestinationName(*routingValue); err != nil {
			return fmt.Errorf("clearing %s for routing value %q: %w", table, *routingValue, err)
		}
	}
	if err := s.cut(ctx, t, s.clean); err != nil {
		return err
	}
	body, err := clearRecord(s.o, t.schema, routingValue, bound, s.txTime)
	if err != nil {
		return fmt.Errorf("building the clear of %s: %w", table, err)
	}
	o := clearOut(table, t.schema, routingValue, bound, s.clean, body)
	o.Span = s.span(o)
	if err := s.send(ctx, o); err != nil {
		return err
	}
	s.o.Metrics.Clears.Inc()
	return nil
}

// clearRecord encodes the one-row batch of a clear of sc's table at bound
// (every column NULL but the routing column of a scoped clear).
func clearRecord(o *Options, sc *batch.Schema, routingValue *string, bound proto.Position, commit time.Time) ([]byte, error) {
	r := batch.Row{Op: proto.OpClear, Pos: bound, CommitTime: commit}
	r.Kinds = make([]byte, len(sc.Columns))
	r.Values = make([][]byte, len(sc.Columns))
	for i := range r.Kinds {
		r.Kinds[i] = batch.Null
	}
	if routingValue != nil {
		r.Kinds[sc.RoutingIdx], r.Values[sc.RoutingIdx] = batch.Text, []byte(*routingValue)
	}
	b := batch.NewBuilder(o.Mem, sc, o.Append)
	defer b.Release()
	if err := b.Append(&r); err != nil {
		return nil, err
	}
	rec := b.Cut()
	defer rec.Release()
	parts, err := encodeParts(rec, 0, o.Metrics)
	if err != nil {
		return nil, err
	}
	return parts[0].body, nil
}

// clearOut is the CHANGES message of a clear (its id proto.ClearMsgID).
func clearOut(table string, sc *batch.Schema, routingValue *string, bound proto.Position, through proto.LSN, body []byte) Out {
	scope := ""
	if routingValue != nil {
		scope, _ = proto.DestinationName(*routingValue) // checked by the caller
	}
	o := batchOut(table, sc.Fingerprint, bound, bound, through, 1, body)
	o.ID = proto.ClearMsgID(table, scope, bound)
	o.Msg.Header.Set(proto.HeaderMsgID, o.ID)
	return o
}
