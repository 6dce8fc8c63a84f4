package route

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/services/router/internal/split"
)

// Retired destinations' parts are ranked after every partition by the
// split, so dropRetired drops exactly them, keeps the others in partition
// order (each partition still one window), and reports the dropped rows;
// without a Retired function nothing is dropped.
func TestDropRetired(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rec := benchBatch(t, mem, 500, 6)
	defer rec.Release()
	sp := split.New(mem, split.Auto(), 2)
	plain := New(Options{Partitions: 8})
	all, err := sp.SplitBy(rec, plain.rank)
	if err != nil {
		t.Fatal(err)
	}
	defer all.Release()
	if len(all.Parts) < 4 {
		t.Fatalf("%d parts", len(all.Parts))
	}
	if kept, n := dropRetired(all.Parts); len(kept) != len(all.Parts) || n != 0 {
		t.Fatalf("without Retired: %d of %d parts, %d rows dropped", len(kept), len(all.Parts), n)
	}
	retired := map[string]bool{all.Parts[0].Destination: true, all.Parts[2].Destination: true}
	var wantRows int64
	var want []string
	for _, p := range all.Parts {
		if retired[p.Destination] {
			wantRows += p.Batch.NumRows()
		} else {
			want = append(want, p.Destination)
		}
	}
	h := New(Options{Partitions: 8, Retired: func(d string) bool { return retired[d] }})
	res, err := sp.SplitBy(rec, h.rank)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	kept, n := dropRetired(res.Parts)
	if n != wantRows || len(kept) != len(want) {
		t.Fatalf("dropped %d rows, kept %d parts; want %d rows, %d parts", n, len(kept), wantRows, len(want))
	}
	for i, p := range kept {
		if p.Destination != want[i] {
			t.Fatalf("part %d is %s, want %s", i, p.Destination, want[i])
		}
		if i > 0 && p.Lo != kept[i-1].Hi {
			t.Fatalf("part %s starts at row %d, the previous ends at %d", p.Destination, p.Lo, kept[i-1].Hi)
		}
	}
	gone := New(Options{Partitions: 8, Retired: func(string) bool { return true }})
	everything, err := sp.SplitBy(rec, gone.rank)
	if err != nil {
		t.Fatal(err)
	}
	defer everything.Release()
	if kept, n := dropRetired(everything.Parts); len(kept) != 0 || n != rec.NumRows() {
		t.Fatalf("everything retired: %d parts kept, %d rows dropped", len(kept), n)
	}
}

// BenchmarkDropRetired: the retired filter's cost per batch (its rank in
// the split and the drop) against the split alone, with a cache-shaped lookup (an immutable map behind an
// atomic pointer) holding 1,000 retired destinations, none in the batch.
func BenchmarkDropRetired(b *testing.B) {
	mem := memory.NewGoAllocator()
	rec := benchBatch(b, mem, 10000, 1000)
	defer rec.Release()
	sp := split.New(mem, split.Auto(), 2)
	retired := map[string]struct{}{}
	for i := range 1000 {
		retired["gone-"+strconv.Itoa(i)] = struct{}{}
	}
	var cur atomic.Pointer[map[string]struct{}]
	cur.Store(&retired)
	h := New(Options{Partitions: 8, Retired: func(d string) bool { _, ok := (*cur.Load())[d]; return ok }})
	plain := New(Options{Partitions: 8})
	for _, c := range []struct {
		name string
		h    *Handler
	}{{"split", plain}, {"split+retired", h}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				r, err := sp.SplitBy(rec, c.h.rank)
				if err != nil {
					b.Fatal(err)
				}
				if kept, _ := dropRetired(r.Parts); len(kept) != len(r.Parts) {
					b.Fatal(len(kept))
				}
				r.Release()
			}
		})
	}
}
