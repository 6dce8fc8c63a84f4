package split

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// A list column whose selected rows are all NULL or empty has an empty child
// that an IPC decode leaves without buffers. Splitting such a batch once
// panicked (and the whole batch was dead-lettered: its rows were lost).
// NULL and empty lists must keep their difference through the split.
func TestSplitEmptyListChildAfterIPC(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := pt.Batch(mem, []pt.Row{
		{ID: 1, Tenant: "a", Op: proto.OpInsert, LSN: 1, Seq: 1},
		{ID: 2, Tenant: "b", Op: proto.OpInsert, LSN: 1, Seq: 2, Unchanged: []string{}},
		{ID: 3, Tenant: "a", Op: proto.OpInsert, LSN: 1, Seq: 3},
	})
	body, err := arrowcodec.Encode(b)
	b.Release()
	if err != nil {
		t.Fatal(err)
	}
	dec, err := arrowcodec.Decode(body, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Release()
	// Rebuild the list column the way an IPC reader may hand it over: an
	// empty child with no buffers at all.
	ui := dec.Schema().FieldIndices(proto.ColUnchanged)[0]
	old := dec.Column(ui).Data()
	child := array.NewData(arrow.BinaryTypes.String, 0, []*memory.Buffer{nil, nil, nil}, nil, 0, 0)
	defer child.Release()
	offs := memory.NewResizableBuffer(mem)
	offs.Resize(4 * (old.Len() + 1)) // all zero: every list NULL or empty
	defer offs.Release()
	ld := array.NewData(old.DataType(), old.Len(), []*memory.Buffer{old.Buffers()[0], offs}, []arrow.ArrayData{child}, old.NullN(), 0)
	defer ld.Release()
	list := array.MakeFromData(ld)
	defer list.Release()
	cols := append([]arrow.Array{}, dec.Columns()...)
	cols[ui] = list
	rec := array.NewRecordBatch(dec.Schema(), cols, dec.NumRows())
	defer rec.Release()
	res, err := New(mem, Auto(), 2).Split(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	nulls := map[string][]bool{}
	for _, p := range res.Parts {
		col := p.Batch.Column(p.Batch.Schema().FieldIndices(proto.ColUnchanged)[0]).(*array.List)
		for i := 0; i < col.Len(); i++ {
			nulls[p.Destination] = append(nulls[p.Destination], col.IsNull(i))
		}
	}
	if len(nulls["a"]) != 2 || !nulls["a"][0] || !nulls["a"][1] || len(nulls["b"]) != 1 {
		t.Fatalf("NULL lists per destination %v; want a: [true true], b: one row", nulls)
	}
}
