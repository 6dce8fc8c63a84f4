package batch

import (
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/pgtypes"
)

func testSchema(t *testing.T) *Schema {
	s, err := NewSchema("public.t", []Column{
		{Name: "tenant_id", Kind: proto.KindText, PgType: "text"},
		{Name: "id", Kind: proto.KindInt64, PgType: "bigint"},
		{Name: "body", Kind: proto.KindText, PgType: "text"},
	}, []string{"tenant_id", "id"}, "tenant_id")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSchemaMetadata(t *testing.T) {
	s := testSchema(t)
	md := s.Arrow.Metadata()
	for k, want := range map[string]string{proto.MetaTable: "public.t", proto.MetaPrimaryKey: "tenant_id,id", proto.MetaRouting: "tenant_id"} {
		if v, _ := md.GetValue(k); v != want {
			t.Errorf("%s = %q, want %q", k, v, want)
		}
	}
	f := s.Arrow.Field(1)
	if k, err := proto.FieldKind(f); err != nil || k != proto.KindInt64 {
		t.Errorf("field kind %v %v", k, err)
	}
	names := []string{}
	for _, f := range s.Arrow.Fields()[3:] {
		names = append(names, f.Name)
	}
	want := []string{proto.ColOp, proto.ColLSN, proto.ColSeq, proto.ColCommitTime, proto.ColUnchanged}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("system columns %v, want %v", names, want)
		}
	}
	if _, err := NewSchema("public.t", s.Columns, []string{"nope"}, "tenant_id"); err == nil {
		t.Error("a key column that does not exist was accepted")
	}
	s2 := testSchema(t)
	if s2.Fingerprint != s.Fingerprint {
		t.Error("fingerprint is not stable")
	}
}

func TestBuilderCutAndRelease(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := NewBuilder(mem, testSchema(t), pgtypes.AppendText)
	defer b.Release()
	now := time.Unix(1700000000, 0)
	for i := 1; i <= 3; i++ {
		r := Row{Op: proto.OpUpdate, Pos: proto.Position{LSN: 100, Seq: uint64(i)}, CommitTime: now,
			Kinds: []byte{Text, Text, Unchanged}, Values: [][]byte{[]byte("t"), []byte(strconv.Itoa(i)), nil}, Unchanged: []string{"body"}}
		if err := b.Append(&r); err != nil {
			t.Fatal(err)
		}
	}
	if b.Rows() != 3 || b.First().Seq != 1 || b.Last().Seq != 3 || b.Bytes() <= 0 {
		t.Fatalf("rows %d first %s last %s bytes %d", b.Rows(), b.First(), b.Last(), b.Bytes())
	}
	rec := b.Cut()
	defer rec.Release()
	if rec.NumRows() != 3 || b.Rows() != 0 {
		t.Fatalf("cut %d rows, %d left", rec.NumRows(), b.Rows())
	}
	if v := rec.Column(1).(*array.Int64).Value(2); v != 3 {
		t.Errorf("id = %d", v)
	}
	if !rec.Column(2).IsNull(0) {
		t.Error("unchanged value not NULL")
	}
	l := rec.Column(7).(*array.List)
	if s, e := l.ValueOffsets(0); e-s != 1 || l.ListValues().(*array.String).Value(int(s)) != "body" {
		t.Error("_sluice_unchanged does not list body")
	}
	if ts := rec.Column(6).(*array.Timestamp).Value(0); ts != arrow.Timestamp(now.UnixMicro()) {
		t.Errorf("commit time %d", ts)
	}
	bad := Row{Op: proto.OpInsert, Kinds: []byte{Text, Text, Null}, Values: [][]byte{[]byte("t"), []byte("x"), nil}}
	if err := b.Append(&bad); err == nil {
		t.Error("a malformed bigint was accepted")
	}
}
