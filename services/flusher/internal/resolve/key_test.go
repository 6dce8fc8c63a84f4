package resolve

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
)

// TestResolveKeyColumnsWithCommasAndSpaces: a batch keyed by columns named
// "a,b" and " x " (the key a list in the schema metadata, proto.MetaKey)
// resolves per key: two versions of one key keep the newest, another key
// is kept. Read from the comma-joined form (and trimmed, as before) the
// key named columns "a", "b" and "x", which the batch does not hold.
func TestResolveKeyColumnsWithCommasAndSpaces(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	md := proto.SchemaMetadata("public.keyed", []string{"a,b", " x "}, "a,b")
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "a,b", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: " x ", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: proto.ColOp, Type: arrow.PrimitiveTypes.Int8},
		{Name: proto.ColLSN, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColSeq, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColCommitTime, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: proto.ColUnchanged, Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, &md)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	for _, r := range []struct {
		ab  string
		x   int64
		lsn uint64
	}{{"k,1", 1, 10}, {"k,1", 1, 20}, {"k,1", 2, 10}} {
		b.Field(0).(*array.StringBuilder).Append(r.ab)
		b.Field(1).(*array.Int64Builder).Append(r.x)
		b.Field(2).(*array.Int8Builder).Append(proto.OpInsert)
		b.Field(3).(*array.Uint64Builder).Append(r.lsn)
		b.Field(4).(*array.Uint64Builder).Append(1)
		b.Field(5).AppendNull()
		b.Field(6).AppendNull()
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	out, _, err := Resolve(mem, []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	if out.NumRows() != 2 {
		t.Fatalf("resolved %d rows, want 2 (one per key)", out.NumRows())
	}
	lsns := out.Column(3).(*array.Uint64)
	xs := out.Column(1).(*array.Int64)
	for i := 0; i < int(out.NumRows()); i++ {
		if xs.Value(i) == 1 && lsns.Value(i) != 20 {
			t.Fatalf("key (k,1, 1) kept LSN %d, want the newest, 20", lsns.Value(i))
		}
	}
}
