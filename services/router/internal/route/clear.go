package route

import (
	"maps"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"

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
