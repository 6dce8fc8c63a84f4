package catalogtest

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// Col is one column of a test table.
type Col struct {
	Name   string
	Kind   proto.Kind
	PgType string
}

// Table is a test table.
type Table struct {
	Name    string // schema.table
	Columns []Col
	PK      []string
	Routing string
}

// Items is a table with one column of most kinds.
var Items = Table{
	Name: "public.items",
	Columns: []Col{
		{"id", proto.KindInt64, "bigint"},
		{"tenant", proto.KindText, "text"},
		{"name", proto.KindText, "text"},
		{"qty", proto.KindInt32, "integer"},
		{"price", proto.KindNumeric, "numeric"},
		{"ratio", proto.KindFloat64, "double precision"},
		{"ok", proto.KindBool, "boolean"},
		{"at", proto.KindTimestampTZ, "timestamp with time zone"},
		{"local", proto.KindTimestamp, "timestamp without time zone"},
		{"day", proto.KindDate, "date"},
		{"tags", proto.ArrayKind(proto.KindText), "text[]"},
		{"doc", proto.KindJSONB, "jsonb"},
		{"raw", proto.KindBytea, "bytea"},
		{"big", proto.KindText, "text"},
	},
	PK:      []string{"id"},
	Routing: "tenant",
}

// Row is one change of a test table. Values holds Go values by column:
// int64/int32/int16, float64, bool, string, []byte, int64 microseconds for
// timestamps, int32 days for dates, []any for arrays, nil for NULL.
// A missing column is NULL.
type Row struct {
	Op        int8
	LSN, Seq  uint64
	Values    map[string]any
	Unchanged []string
	Commit    int64 // microseconds
}

// Schema is the Arrow schema of t's rows, system columns included.
func (t Table) Schema() *arrow.Schema {
	var fields []arrow.Field
	for _, c := range t.Columns {
		at, err := c.Kind.ArrowType()
		if err != nil {
			panic(err)
		}
		fields = append(fields, arrow.Field{Name: c.Name, Type: at, Nullable: true,
			Metadata: arrow.NewMetadata([]string{proto.MetaKind, proto.MetaPgType}, []string{string(c.Kind), c.PgType})})
	}
	fields = append(fields,
		arrow.Field{Name: proto.ColOp, Type: arrow.PrimitiveTypes.Int8},
		arrow.Field{Name: proto.ColLSN, Type: arrow.PrimitiveTypes.Uint64},
		arrow.Field{Name: proto.ColSeq, Type: arrow.PrimitiveTypes.Uint64},
		arrow.Field{Name: proto.ColCommitTime, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		arrow.Field{Name: proto.ColUnchanged, Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	)
	md := proto.SchemaMetadata(t.Name, t.PK, t.Routing)
	return arrow.NewSchema(fields, &md)
}

// Record builds one record batch of rows.
func (t Table) Record(rows []Row) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, t.Schema())
	defer b.Release()
	for _, r := range rows {
		for i, c := range t.Columns {
			appendValue(b.Field(i), c.Kind, r.Values[c.Name])
		}
		n := len(t.Columns)
		b.Field(n).(*array.Int8Builder).Append(r.Op)
		b.Field(n + 1).(*array.Uint64Builder).Append(r.LSN)
		b.Field(n + 2).(*array.Uint64Builder).Append(r.Seq)
		b.Field(n + 3).(*array.TimestampBuilder).Append(arrow.Timestamp(r.Commit))
		lb := b.Field(n + 4).(*array.ListBuilder)
		lb.Append(true)
		for _, u := range r.Unchanged {
			lb.ValueBuilder().(*array.StringBuilder).Append(u)
		}
	}
	return b.NewRecordBatch()
}

func appendValue(b array.Builder, k proto.Kind, v any) {
	if v == nil {
		b.AppendNull()
		return
	}
	if e, ok := k.Elem(); ok {
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		for _, x := range v.([]any) {
			appendValue(lb.ValueBuilder(), e, x)
		}
		return
	}
	switch bb := b.(type) {
	case *array.Int16Builder:
		bb.Append(int16(toI64(v)))
	case *array.Int32Builder:
		bb.Append(int32(toI64(v)))
	case *array.Int64Builder:
		bb.Append(toI64(v))
	case *array.Float32Builder:
		bb.Append(float32(v.(float64)))
	case *array.Float64Builder:
		bb.Append(v.(float64))
	case *array.BooleanBuilder:
		bb.Append(v.(bool))
	case *array.TimestampBuilder:
		bb.Append(arrow.Timestamp(toI64(v)))
	case *array.Date32Builder:
		bb.Append(arrow.Date32(toI64(v)))
	case *array.BinaryBuilder:
		switch x := v.(type) {
		case []byte:
			bb.Append(x)
		case string:
			bb.Append([]byte(x))
		}
	case *array.StringBuilder:
		bb.Append(v.(string))
	default:
		panic(fmt.Sprintf("catalogtest: no builder for %T", b))
	}
}

func toI64(v any) int64 {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	}
	panic(fmt.Sprintf("catalogtest: not an integer: %T", v))
}

// Encode encodes rows as a pack of table t for destination dest.
func Encode(t testing.TB, table Table, storeID, dest, packID string, rows []Row) ([]byte, packstore.PackMeta) {
	t.Helper()
	rec := table.Record(rows)
	defer rec.Release()
	meta := packstore.PackMeta{PackID: packID, StoreID: storeID, Destination: dest, Table: table.Name, Schema: arrowcodec.Fingerprint(rec.Schema())}
	data, err := packstore.EncodePack([]arrow.RecordBatch{rec}, meta)
	if err != nil {
		t.Fatalf("catalogtest: encoding pack %s: %v", packID, err)
	}
	meta2, _, err := packstore.ReadPackMeta(data)
	if err != nil {
		t.Fatalf("catalogtest: reading back pack %s: %v", packID, err)
	}
	return data, meta2
}

// Write encodes rows as a pack and puts it in store at its path.
func Write(t testing.TB, store packstore.Store, table Table, dest, packID string, rows []Row) packstore.PackMeta {
	t.Helper()
	data, meta := Encode(t, table, store.ID(), dest, packID, rows)
	if err := store.Put(t.Context(), meta.Path(), data); err != nil {
		t.Fatalf("catalogtest: writing pack %s: %v", packID, err)
	}
	return meta
}

// Part is one destination's rows in a segment (EncodeSegment).
type Part struct {
	Destination string
	Rows        []Row
}

// EncodeSegment encodes parts as one segment of table t; id is the
// segment's id (proto.SegmentID).
func EncodeSegment(t testing.TB, table Table, storeID, id string, parts []Part) ([]byte, packstore.PackMeta) {
	t.Helper()
	var sp []packstore.SegmentPart
	var fp string
	for _, p := range parts {
		rec := table.Record(p.Rows)
		defer rec.Release()
		fp = arrowcodec.Fingerprint(rec.Schema())
		sp = append(sp, packstore.SegmentPart{Destination: p.Destination, Recs: []arrow.RecordBatch{rec}})
	}
	data, _, err := packstore.EncodeSegment(sp, packstore.SegmentMeta{PackID: id, StoreID: storeID, Table: table.Name, Schema: fp})
	if err != nil {
		t.Fatalf("catalogtest: encoding segment %s: %v", id, err)
	}
	meta, _, err := packstore.ReadPackMeta(data)
	if err != nil {
		t.Fatalf("catalogtest: reading back segment %s: %v", id, err)
	}
	return data, meta
}

// WriteSegment encodes parts as a segment and puts it in store at its path.
func WriteSegment(t testing.TB, store packstore.Store, table Table, id string, parts []Part) packstore.PackMeta {
	t.Helper()
	data, meta := EncodeSegment(t, table, store.ID(), id, parts)
	if err := store.Put(t.Context(), meta.Path(), data); err != nil {
		t.Fatalf("catalogtest: writing segment %s: %v", id, err)
	}
	return meta
}

// Ins, Upd and Del are row constructors.
func Ins(lsn, seq uint64, vals map[string]any) Row {
	return Row{Op: proto.OpInsert, LSN: lsn, Seq: seq, Values: vals}
}

// Upd is an update; unchanged names TOAST-unchanged columns (NULL in vals).
func Upd(lsn, seq uint64, vals map[string]any, unchanged ...string) Row {
	return Row{Op: proto.OpUpdate, LSN: lsn, Seq: seq, Values: vals, Unchanged: unchanged}
}

// Clear is a clear (proto.OpClear) at its bound: every column NULL but the
// routing column's value, when routing is not nil.
func Clear(lsn, seq uint64, routing map[string]any) Row {
	return Row{Op: proto.OpClear, LSN: lsn, Seq: seq, Values: routing}
}

// Del is a delete tombstone carrying the key.
func Del(lsn, seq uint64, key map[string]any) Row {
	return Row{Op: proto.OpDelete, LSN: lsn, Seq: seq, Values: key}
}
