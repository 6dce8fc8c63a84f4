package route

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
)

// clearBatch is a one-row clear of benchBatch's table: routing value NULL
// (table-wide) or tenant (scoped).
func clearBatch(t *testing.T, mem memory.Allocator, tenant *int64) arrow.RecordBatch {
	t.Helper()
	src := benchBatch(t, mem, 1, 1)
	defer src.Release()
	b := array.NewRecordBuilder(mem, src.Schema())
	defer b.Release()
	for i, f := range src.Schema().Fields() {
		switch f.Name {
		case "tenant_id":
			if tenant != nil {
				b.Field(i).(*array.Int64Builder).Append(*tenant)
			} else {
				b.Field(i).AppendNull()
			}
		case proto.ColOp:
			b.Field(i).(*array.Int8Builder).Append(proto.OpClear)
		case proto.ColLSN:
			b.Field(i).(*array.Uint64Builder).Append(0x500)
		case proto.ColSeq:
			b.Field(i).(*array.Uint64Builder).Append(3)
		case proto.ColCommitTime:
			b.Field(i).(*array.TimestampBuilder).Append(1)
		default:
			b.Field(i).AppendNull()
		}
	}
	return b.NewRecordBatch()
}

// A table-wide clear (routing value NULL) becomes one message per
// partition, in partition order, each with PartitionMsgID and the clear row
// under proto.ClearAllDestinations (which DestinationRuns accepts); a
// scoped clear is no table-wide one (it routes like a row). Both
// ColDestination encodings.
func TestClearMessages(t *testing.T) {
	for _, dict := range []bool{false, true} {
		t.Run(fmt.Sprintf("dictionary=%v", dict), func(t *testing.T) {
			defer func(v bool) { destDictionary = v }(destDictionary)
			destDictionary = dict
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			tenant := int64(7)
			scoped := clearBatch(t, mem, &tenant)
			defer scoped.Release()
			if tableClear(scoped) {
				t.Error("a scoped clear taken for a table-wide one")
			}
			rec := clearBatch(t, mem, nil)
			defer rec.Release()
			if !tableClear(rec) {
				t.Fatal("a table-wide clear not recognized")
			}
			const partitions = 5
			h := New(Options{Partitions: partitions})
			base := nats.Header{}
			base.Set(proto.HeaderTable, "public.orders")
			msgs, err := h.clearMessages("x-in", base, rec)
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != partitions {
				t.Fatalf("%d messages, want %d", len(msgs), partitions)
			}
			for p, m := range msgs {
				if m.Subject != proto.RoutedPartitionSubject(p) || m.Header.Get(proto.HeaderMsgID) != proto.PartitionMsgID("x-in", p) {
					t.Errorf("message %d: subject %s id %s", p, m.Subject, m.Header.Get(proto.HeaderMsgID))
				}
				if m.Header.Get(proto.HeaderFirst) != "0/500:3" || m.Header.Get(proto.HeaderRows) != "1" {
					t.Errorf("message %d headers %v", p, m.Header)
				}
				out, err := arrowcodec.Decode(m.Data, mem)
				if err != nil {
					t.Fatal(err)
				}
				runs, _, err := proto.DestinationRuns(out)
				if err != nil || len(runs) != 1 || runs[0].Destination != proto.ClearAllDestinations {
					t.Errorf("message %d runs %v %v", p, runs, err)
				}
				out.Release()
			}
		})
	}
}
