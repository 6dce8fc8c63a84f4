package route

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/services/router/internal/split"
)

// Retired destinations' parts are dropped after the split, in place order
// is kept for the others, and the dropped rows are reported; without a
// Retired function nothing is dropped.
func TestDropRetired(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rec := benchBatch(t, mem, 500, 6)
	defer rec.Release()
	res, err := split.New(mem, split.Auto(), 2).Split(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	if len(res.Parts) < 4 {
		t.Fatalf("%d parts", len(res.Parts))
	}
	retired := map[string]bool{res.Parts[0].Destination: true, res.Parts[2].Destination: true}
	var wantRows int64
	var want []string
	for _, p := range res.Parts {
		if retired[p.Destination] {
			wantRows += p.Batch.NumRows()
		} else {
			want = append(want, p.Destination)
		}
	}

	plain := New(Options{Partitions: 8})
	if kept, n := plain.dropRetired(res.Parts); len(kept) != len(res.Parts) || n != 0 {
		t.Fatalf("without Retired: %d of %d parts, %d rows dropped", len(kept), len(res.Parts), n)
	}
	h := New(Options{Partitions: 8, Retired: func(d string) bool { return retired[d] }})
	kept, n := h.dropRetired(res.Parts)
	if n != wantRows || len(kept) != len(want) {
		t.Fatalf("dropped %d rows, kept %d parts; want %d rows, %d parts", n, len(kept), wantRows, len(want))
	}
	for i, p := range kept {
		if p.Destination != want[i] {
			t.Fatalf("part %d is %s, want %s", i, p.Destination, want[i])
		}
	}
	all := New(Options{Partitions: 8, Retired: func(string) bool { return true }})
	if kept, _ := all.dropRetired(res.Parts); len(kept) != 0 {
		t.Fatalf("everything retired: %d parts kept", len(kept))
	}
	if len(res.Parts) < 4 {
		t.Fatal("dropRetired must not modify the split's parts (Release frees them all)")
	}
}

// BenchmarkDropRetired: the retired filter's cost per batch against the
// split it follows, with a cache-shaped lookup (an immutable map behind an
// atomic pointer) holding 1,000 retired destinations, none in the batch.
func BenchmarkDropRetired(b *testing.B) {
	mem := memory.NewGoAllocator()
	rec := benchBatch(b, mem, 10000, 1000)
	defer rec.Release()
	sp := split.New(mem, split.Auto(), 2)
	res, err := sp.Split(rec)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Release()
	retired := map[string]struct{}{}
	for i := range 1000 {
		retired["gone-"+strconv.Itoa(i)] = struct{}{}
	}
	var cur atomic.Pointer[map[string]struct{}]
	cur.Store(&retired)
	h := New(Options{Partitions: 8, Retired: func(d string) bool { _, ok := (*cur.Load())[d]; return ok }})
	b.Run("split", func(b *testing.B) {
		for b.Loop() {
			r, err := sp.Split(rec)
			if err != nil {
				b.Fatal(err)
			}
			r.Release()
		}
	})
	b.Run("dropRetired", func(b *testing.B) {
		for b.Loop() {
			if kept, _ := h.dropRetired(res.Parts); len(kept) != len(res.Parts) {
				b.Fatal(len(kept))
			}
		}
	})
}
