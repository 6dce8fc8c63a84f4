package resolve

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/pgtypes"
)

// claimBatch builds rows (id, body, bin) of public.blobs; claimed rows name
// body and bin in _sluice_claims and hold NULL there. withClaims false
// gives the table's own schema (no _sluice_claims).
func claimBatch(mem memory.Allocator, withClaims bool, bodies []string, claimed []bool) arrow.RecordBatch {
	meta := func(k proto.Kind) arrow.Metadata {
		return arrow.NewMetadata([]string{proto.MetaKind, proto.MetaPgType}, []string{string(k), string(k)})
	}
	fields := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true, Metadata: meta(proto.KindInt64)},
		{Name: "body", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: meta(proto.KindText)},
		{Name: "bin", Type: arrow.BinaryTypes.Binary, Nullable: true, Metadata: meta(proto.KindBytea)},
		{Name: proto.ColOp, Type: arrow.PrimitiveTypes.Int8},
		{Name: proto.ColLSN, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColSeq, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColUnchanged, Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}
	if withClaims {
		fields = append(fields, arrow.Field{Name: proto.ColClaims, Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true})
	}
	md := arrow.NewMetadata([]string{proto.MetaTable, proto.MetaPrimaryKey, proto.MetaRouting}, []string{"public.blobs", "id", "id"})
	b := array.NewRecordBuilder(mem, arrow.NewSchema(fields, &md))
	defer b.Release()
	for i, body := range bodies {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if claimed[i] {
			b.Field(1).AppendNull()
			b.Field(2).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(body)
			b.Field(2).(*array.BinaryBuilder).Append([]byte(body))
		}
		b.Field(3).(*array.Int8Builder).Append(proto.OpInsert)
		b.Field(4).(*array.Uint64Builder).Append(100)
		b.Field(5).(*array.Uint64Builder).Append(uint64(i + 1))
		b.Field(6).AppendNull()
		if withClaims {
			cb := b.Field(7).(*array.ListBuilder)
			if claimed[i] {
				cb.Append(true)
				cb.ValueBuilder().(*array.StringBuilder).AppendValues([]string{"body", "bin"}, nil)
			} else {
				cb.AppendNull()
			}
		}
	}
	return b.NewRecordBatch()
}

// The values a batch carries by reference are read from the pack store and
// put back into their columns (converted by kind: bytea from its hex text
// form), and _sluice_claims is gone: the result equals the batch the table
// would have had inline, fingerprint included. A missing object is
// ErrClaim (permanent).
func TestInlineClaims(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	store, err := packstore.OpenDir(t.TempDir(), "local")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("v", 3<<20)
	bodies := []string{"a", big, "c", big + "2", "e"}
	claimed := []bool{false, true, false, true, false}
	for i, c := range claimed {
		if !c {
			continue
		}
		pos := proto.Position{LSN: 100, Seq: uint64(i + 1)}
		if err := store.PutClaim(ctx, proto.ClaimPath("public.blobs", pos, "body"), []byte(bodies[i])); err != nil {
			t.Fatal(err)
		}
		hex := `\x` + strings.Repeat("76", len(bodies[i])-1) + map[bool]string{true: "32", false: "76"}[i == 3]
		if err := store.PutClaim(ctx, proto.ClaimPath("public.blobs", pos, "bin"), []byte(hex)); err != nil {
			t.Fatal(err)
		}
	}
	rec := claimBatch(mem, true, bodies, claimed)
	defer rec.Release()
	out, err := InlineClaims(ctx, mem, rec, store.GetClaim, pgtypes.AppendText)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	want := claimBatch(mem, false, bodies, make([]bool, len(bodies)))
	defer want.Release()
	if !array.RecordEqual(out, want) {
		t.Errorf("inlined batch differs from the inline one:\n%v\nwant\n%v", out.Schema(), want.Schema())
	}
	if a, b := arrowcodec.Fingerprint(out.Schema()), arrowcodec.Fingerprint(want.Schema()); a != b {
		t.Errorf("fingerprint %s, the table's %s", a, b)
	}

	// Negative: the object is missing.
	if err := os.Remove(filepath.Join(store.Root(), filepath.FromSlash(proto.ClaimPath("public.blobs", proto.Position{LSN: 100, Seq: 4}, "bin")))); err != nil {
		t.Fatal(err)
	}
	if _, err := InlineClaims(ctx, mem, rec, store.GetClaim, pgtypes.AppendText); !errors.Is(err, ErrClaim) {
		t.Errorf("missing object: got %v, want ErrClaim", err)
	}
}
