package split

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestChunkedMatchesSerial: the chunked assignment must produce exactly the
// serial pass's result: the same parts in the same order (buckets numbered by
// first appearance), the same rows in the same order, the same counts.
func TestChunkedMatchesSerial(t *testing.T) {
	listRes, err := List(map[string]string{"1": "one", "2": "one", "shop1": "s1", "": "empty"}, false)
	if err != nil {
		t.Fatal(err)
	}
	dropRes, _ := List(map[string]string{"1": "one", "shop1": "s1"}, true)
	types := []arrow.DataType{arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64, arrow.BinaryTypes.String}
	for _, typ := range types {
		for it := range 6 {
			t.Run(fmt.Sprintf("%s/%d", typ, it), func(t *testing.T) {
				mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
				defer mem.AssertSize(t, 0)
				r := rand.New(rand.NewPCG(uint64(it), 77))
				tenants := genTenants(r, typ, 1+r.IntN(40))
				tenants = append(tenants, strp("1"), strp("2"))
				resolve := []Resolve{Auto(), listRes, dropRes}[it%3]
				rec, _ := genBatch(t, r, mem, typ, tenants, 1+r.IntN(4000), it%2 == 0)
				defer rec.Release()
				in := rec
				if it%2 == 1 {
					in = rec.NewSlice(5, rec.NumRows())
					defer in.Release()
				}
				split := func(chunks int) *Result {
					forceChunks = chunks
					defer func() { forceChunks = 0 }()
					res, err := New(mem, resolve, 2).Split(in)
					if err != nil {
						t.Fatal(err)
					}
					return res
				}
				want := split(0)
				defer want.Release()
				for _, c := range []int{1, 2, 5} {
					got := split(c)
					if err := sameResult(got, want); err != nil {
						t.Fatalf("%d chunks: %v", c, err)
					}
					got.Release()
				}
			})
		}
	}
}

func sameResult(got, want *Result) error {
	if got.Rows != want.Rows || got.Dropped != want.Dropped || got.MoveOuts != want.MoveOuts || got.Mutations != want.Mutations {
		return fmt.Errorf("counts %d/%d/%d/%d, want %d/%d/%d/%d", got.Rows, got.Dropped, got.MoveOuts, got.Mutations, want.Rows, want.Dropped, want.MoveOuts, want.Mutations)
	}
	g, w := slices.Clone(got.Reasons), slices.Clone(want.Reasons)
	slices.Sort(g)
	slices.Sort(w)
	if !slices.Equal(g, w) {
		return fmt.Errorf("reasons %q, want %q", g, w)
	}
	if len(got.Parts) != len(want.Parts) {
		return fmt.Errorf("%d parts, want %d", len(got.Parts), len(want.Parts))
	}
	same := func(gp, wp Part) error {
		if gp.Destination != wp.Destination || gp.First != wp.First || gp.Last != wp.Last || gp.Batch.NumRows() != wp.Batch.NumRows() {
			return fmt.Errorf("part %q (%d rows, %v..%v), want %q (%d rows, %v..%v)", gp.Destination, gp.Batch.NumRows(), gp.First, gp.Last, wp.Destination, wp.Batch.NumRows(), wp.First, wp.Last)
		}
		for j := range int(gp.Batch.NumRows()) {
			if a, b := rowStrings(gp.Batch, j), rowStrings(wp.Batch, j); a != b {
				return fmt.Errorf("part %q row %d: %s, want %s", gp.Destination, j, a, b)
			}
		}
		return nil
	}
	for i := range got.Parts {
		if err := same(got.Parts[i], want.Parts[i]); err != nil {
			return err
		}
	}
	if (got.Unroutable == nil) != (want.Unroutable == nil) {
		return fmt.Errorf("unroutable part %v, want %v", got.Unroutable != nil, want.Unroutable != nil)
	}
	if got.Unroutable != nil {
		return same(*got.Unroutable, *want.Unroutable)
	}
	return nil
}
