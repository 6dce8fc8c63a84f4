package catalogtest

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// PackEvent is the PACKS event the flusher publishes for pack m (size: its
// bytes, 0 when not given), on the subject of destination subjectDest
// (m.Destination, unless a test has the event lie about it).
func PackEvent(t testing.TB, m packstore.PackMeta, subjectDest string, size int64) *nats.Msg {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, proto.PackEventSchema)
	defer b.Release()
	for i, v := range []string{m.PackID, m.StoreID, m.Destination, m.Table, m.Path(), m.Schema, m.First.String(), m.Last.String()} {
		b.Field(i).(*array.StringBuilder).Append(v)
	}
	b.Field(8).(*array.Int64Builder).Append(m.Rows)
	b.Field(9).(*array.Int64Builder).Append(m.Tombstones)
	b.Field(10).(*array.Int64Builder).Append(size)
	rec := b.NewRecordBatch()
	defer rec.Release()
	body, err := arrowcodec.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(proto.HeaderWire, proto.WireVersion)
	h.Set(proto.HeaderMsgID, proto.PackMsgID(m.PackID))
	return &nats.Msg{Subject: proto.PacksSubject(subjectDest), Header: h, Data: body}
}
