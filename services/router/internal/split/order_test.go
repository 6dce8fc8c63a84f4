package split

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
)

// SplitBy lays the parts out by (rank, destination): each part's rows are
// [Lo, Hi) of the permuted batch, one part right after the other (the
// unroutable rows first), so a rank's parts are one window; every part holds
// exactly the rows Split gives its destination (isolation and content are
// checkSplit's), serial and chunked alike.
func TestSplitByOrdersPartsByRank(t *testing.T) {
	listRes, err := List(map[string]string{"1": "one", "2": "one", "shop1": "s1"}, false)
	if err != nil {
		t.Fatal(err)
	}
	types := []arrow.DataType{arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64, arrow.BinaryTypes.String}
	for _, typ := range types {
		for it := range 4 {
			t.Run(fmt.Sprintf("%s/%d", typ, it), func(t *testing.T) {
				mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
				defer mem.AssertSize(t, 0)
				r := rand.New(rand.NewPCG(uint64(it), 91))
				tenants := append(genTenants(r, typ, 1+r.IntN(80)), strp("1"), strp("2"))
				resolve := []Resolve{Auto(), listRes}[it%2]
				rec, gr := genBatch(t, r, mem, typ, tenants, 1+r.IntN(1500), it%2 == 0)
				defer rec.Release()
				partitions := 1 + it
				rank := func(d string) int { return proto.Partition(d, partitions) }
				if it >= 2 {
					// Ranks spread far wider than the destinations (and
					// negative): reorder's comparison sort, not its count.
					rank = func(d string) int { return (proto.Partition(d, 7) - 3) << 40 }
				}
				for _, chunks := range []int{0, 1, 3} {
					forceChunks = chunks
					want, err := New(mem, resolve, 2).Split(rec)
					if err != nil {
						t.Fatal(err)
					}
					got, err := New(mem, resolve, 2).SplitBy(rec, rank)
					forceChunks = 0
					if err != nil {
						t.Fatal(err)
					}
					if err := checkSplit(resolve, rec, gr, got); err != nil {
						t.Fatalf("%d chunks: %v", chunks, err)
					}
					if err := checkOrder(got, rank); err != nil {
						t.Fatalf("%d chunks: %v", chunks, err)
					}
					// The same parts as Split's, in the new order.
					sorted := *want
					sorted.Parts = slices.Clone(want.Parts)
					slices.SortFunc(sorted.Parts, func(a, b Part) int {
						return cmp.Or(cmp.Compare(rank(a.Destination), rank(b.Destination)), cmp.Compare(a.Destination, b.Destination))
					})
					if err := sameResult(got, &sorted); err != nil {
						t.Fatalf("%d chunks: %v", chunks, err)
					}
					got.Release()
					want.Release()
				}
			})
		}
	}
}

func checkOrder(res *Result, rank func(string) int) error {
	at := int64(0)
	if u := res.Unroutable; u != nil {
		if u.Lo != 0 {
			return fmt.Errorf("unroutable rows start at %d", u.Lo)
		}
		at = u.Hi
	}
	for i, p := range res.Parts {
		if p.Rank != rank(p.Destination) {
			return fmt.Errorf("part %s: rank %d, want %d", p.Destination, p.Rank, rank(p.Destination))
		}
		if i > 0 {
			q := res.Parts[i-1]
			if q.Rank > p.Rank || q.Rank == p.Rank && q.Destination >= p.Destination {
				return fmt.Errorf("part %d (%d, %s) after (%d, %s)", i, p.Rank, p.Destination, q.Rank, q.Destination)
			}
		}
		if p.Lo != at || p.Hi-p.Lo != p.Batch.NumRows() {
			return fmt.Errorf("part %s: rows [%d, %d), want to start at %d with %d rows", p.Destination, p.Lo, p.Hi, at, p.Batch.NumRows())
		}
		at = p.Hi
		w := res.Window(p.Lo, p.Hi)
		for j := range int(w.NumRows()) {
			if a, b := rowStrings(w, j), rowStrings(p.Batch, j); a != b {
				w.Release()
				return fmt.Errorf("part %s row %d: window has %s, part %s", p.Destination, j, a, b)
			}
		}
		w.Release()
	}
	return nil
}
