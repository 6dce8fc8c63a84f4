package route

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
)

// tableClear reports whether rec is a table-wide clear: the reader sends a
// clear (proto.OpClear) as a batch of its own row, and one whose routing
// value is NULL clears the table in every destination. A clear scoped to
// one destination carries that destination's routing value and is routed
// like any row.
func tableClear(rec arrow.RecordBatch) bool {
	if rec.NumRows() != 1 {
		return false
	}
	sc := rec.Schema()
	ops := sc.FieldIndices(proto.ColOp)
	routing, _ := sc.Metadata().GetValue(proto.MetaRouting)
	rs := sc.FieldIndices(routing)
	if len(ops) != 1 || len(rs) != 1 {
		return false
	}
	op, ok := rec.Column(ops[0]).(*array.Int8)
	return ok && proto.IsClear(op.Value(0)) && rec.Column(rs[0]).IsNull(0)
}

// clearBarrierTimeout bounds how long a table-wide clear waits for the
// messages before it; past it the clear is retried (a transient error).
const clearBarrierTimeout = 30 * time.Second

// awaitEarlier waits until every CHANGES message before msg is acked by the
// router consumer (its ack floor reaches msg's stream sequence - 1): the
// router's workers route batches concurrently, and a table-wide clear
// published to ROUTED before an earlier batch would reach a partition
// before that batch's rows, whose destinations its flusher may not know yet
// when it expands the clear. With the barrier, every destination with a
// row below the clear is in memory or has a cursor when the clear arrives
// (docs/adr/0024-clear.md). Clears are rare; this costs one consumer
// info request per poll.
func (h *Handler) awaitEarlier(ctx context.Context, msg jetstream.Msg) error {
	if h.o.JS == nil {
		return nil
	}
	meta, err := msg.Metadata()
	if err != nil || meta.Sequence.Stream <= 1 {
		return nil
	}
	cons, err := h.o.JS.Consumer(ctx, meta.Stream, meta.Consumer)
	if err != nil {
		return fmt.Errorf("reading consumer %s before a clear: %w", meta.Consumer, err)
	}
	deadline := time.Now().Add(clearBarrierTimeout)
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("reading consumer %s before a clear: %w", meta.Consumer, err)
		}
		if info.AckFloor.Stream+1 >= meta.Sequence.Stream {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the messages before stream sequence %d are not all routed after %s", ErrClearBarrier, meta.Sequence.Stream, clearBarrierTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// clearMessages makes the messages of a table-wide clear: one per
// partition, its row under proto.ClearAllDestinations, which each
// partition's flusher turns into a clear of every destination it knows. The
// ids are those of a batch's partition messages (PartitionMsgID), so a
// replay dedupes.
func (h *Handler) clearMessages(id string, base nats.Header, rec arrow.RecordBatch) ([]*nats.Msg, error) {
	schema := messageSchema(rec.Schema())
	dest := clearDestColumn(memory.DefaultAllocator)
	defer dest.Release()
	cols := append(append(make([]arrow.Array, 0, rec.NumCols()+1), rec.Columns()...), dest)
	msgRec := array.NewRecordBatch(schema, cols, 1)
	defer msgRec.Release()
	body, err := arrowcodec.Encode(msgRec)
	if err != nil {
		return nil, err
	}
	lsn := rec.Column(rec.Schema().FieldIndices(proto.ColLSN)[0]).(*array.Uint64).Value(0)
	seq := rec.Column(rec.Schema().FieldIndices(proto.ColSeq)[0]).(*array.Uint64).Value(0)
	pos := proto.Position{LSN: proto.LSN(lsn), Seq: seq}
	msgs := make([]*nats.Msg, 0, h.o.Partitions)
	for p := range h.o.Partitions {
		hd := maps.Clone(base)
		hd.Set(proto.HeaderFirst, pos.String())
		hd.Set(proto.HeaderLast, pos.String())
		hd.Set(proto.HeaderRows, "1")
		hd.Set(proto.HeaderDestinations, "1")
		hd.Set(proto.HeaderMsgID, proto.PartitionMsgID(id, p))
		msgs = append(msgs, &nats.Msg{Subject: proto.RoutedPartitionSubject(p), Header: hd, Data: body})
	}
	return msgs, nil
}

// clearDestColumn is the ColDestination column of a table-wide clear's one
// row, in the encoding destField names.
func clearDestColumn(mem memory.Allocator) arrow.Array {
	sb := array.NewStringBuilder(mem)
	defer sb.Release()
	sb.Append(proto.ClearAllDestinations)
	if !destDictionary {
		return sb.NewArray()
	}
	ib := array.NewInt32Builder(mem)
	defer ib.Release()
	ib.Append(0)
	idx, dict := ib.NewArray(), sb.NewArray()
	defer idx.Release()
	defer dict.Release()
	return array.NewDictionaryArray(destField().Type, idx, dict)
}
