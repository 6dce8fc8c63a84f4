package packstoretest

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
)

// Row is one change of the test table (id bigint primary key, tenant_id
// text, note text) as it travels: its op and position.
type Row struct {
	ID     int64
	Tenant string
	Note   *string // nil: NULL
	Op     int8
	LSN    uint64
	Seq    uint64
	// Unchanged lists TOAST-unchanged columns (their value is NULL).
	Unchanged []string
}

// Schema is the schema of Batch: public.items with the system columns and
// the metadata the reader puts on every batch.
func Schema() *arrow.Schema {
	kind := func(k proto.Kind, pg string) arrow.Metadata {
		return arrow.NewMetadata([]string{proto.MetaKind, proto.MetaPgType}, []string{string(k), pg})
	}
	md := arrow.NewMetadata(
		[]string{proto.MetaTable, proto.MetaPrimaryKey, proto.MetaRouting},
		[]string{"public.items", "id", "tenant_id"})
	return arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: false, Metadata: kind(proto.KindInt64, "bigint")},
		{Name: "tenant_id", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: kind(proto.KindText, "text")},
		{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: kind(proto.KindText, "text")},
		{Name: proto.ColOp, Type: arrow.PrimitiveTypes.Int8},
		{Name: proto.ColLSN, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColSeq, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColCommitTime, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{Name: proto.ColUnchanged, Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, &md)
}

// Batch builds one batch of rows with Schema.
func Batch(mem memory.Allocator, rows []Row) arrow.RecordBatch {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	b := array.NewRecordBuilder(mem, Schema())
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.ID)
		b.Field(1).(*array.StringBuilder).Append(r.Tenant)
		if r.Note == nil {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.StringBuilder).Append(*r.Note)
		}
		b.Field(3).(*array.Int8Builder).Append(r.Op)
		b.Field(4).(*array.Uint64Builder).Append(r.LSN)
		b.Field(5).(*array.Uint64Builder).Append(r.Seq)
		b.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(int64(r.LSN)))
		lb := b.Field(7).(*array.ListBuilder)
		if len(r.Unchanged) == 0 {
			lb.AppendNull()
		} else {
			lb.Append(true)
			for _, c := range r.Unchanged {
				lb.ValueBuilder().(*array.StringBuilder).Append(c)
			}
		}
	}
	return b.NewRecordBatch()
}

// Str returns a pointer to s, for Row.Note.
func Str(s string) *string { return &s }
