package resolve

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

type got struct {
	id  int64
	op  int8
	lsn uint64
	unc string
}

func rows(rec arrow.RecordBatch) []got {
	var out []got
	ids := rec.Column(0).(*array.Int64)
	ops := rec.Column(3).(*array.Int8)
	lsn := rec.Column(4).(*array.Uint64)
	unc := rec.Column(7).(*array.List)
	for i := 0; i < int(rec.NumRows()); i++ {
		u := ""
		if unc.IsValid(i) {
			u = unc.ValueStr(i)
		}
		out = append(out, got{ids.Value(i), ops.Value(i), lsn.Value(i), u})
	}
	return out
}

func TestResolveNewestWins(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b1 := pt.Batch(mem, []pt.Row{
		{ID: 1, Op: proto.OpInsert, LSN: 10, Seq: 1},
		{ID: 2, Op: proto.OpInsert, LSN: 10, Seq: 2},
		{ID: 3, Op: proto.OpUpdate, LSN: 30, Seq: 1, Unchanged: []string{"note"}},
	})
	defer b1.Release()
	// Arrives second but partly older (out-of-order routers).
	b2 := pt.Batch(mem, []pt.Row{
		{ID: 1, Op: proto.OpDelete, LSN: 20, Seq: 1},  // delete after insert: tombstone kept
		{ID: 3, Op: proto.OpInsert, LSN: 5, Seq: 1},   // older, but the update leaves "note" to it (TOAST): kept
		{ID: 2, Op: proto.OpUpdate, LSN: 10, Seq: 2},  // same position: the later row wins
		{ID: 4, Op: proto.OpMoveOut, LSN: 40, Seq: 1}, // lone tombstone kept
	})
	defer b2.Release()
	out, st, err := Resolve(mem, []arrow.RecordBatch{b1, b2})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	want := []got{{3, proto.OpInsert, 5, ""}, {2, proto.OpUpdate, 10, ""}, {1, proto.OpDelete, 20, ""}, {3, proto.OpUpdate, 30, `["note"]`}, {4, proto.OpMoveOut, 40, ""}}
	if fmt.Sprint(rows(out)) != fmt.Sprint(want) {
		t.Fatalf("got  %v\nwant %v", rows(out), want)
	}
	if st.In != 7 || st.Out != 5 || st.Tombstones != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestResolveNoDuplicatesIsZeroCopy(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := pt.Batch(mem, []pt.Row{{ID: 1, LSN: 1, Seq: 1}, {ID: 2, LSN: 1, Seq: 2}})
	defer b.Release()
	out, _, err := Resolve(mem, []arrow.RecordBatch{b})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	if out != b {
		t.Fatal("expected the input batch back")
	}
}

func BenchmarkResolve(b *testing.B) {
	mem := memory.NewGoAllocator()
	var rs []pt.Row
	for i := 0; i < 10000; i++ {
		rs = append(rs, pt.Row{ID: int64(i % 5000), Op: proto.OpUpdate, LSN: uint64(i), Seq: 1})
	}
	rec := pt.Batch(mem, rs)
	defer rec.Release()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, _, err := Resolve(mem, []arrow.RecordBatch{rec})
		if err != nil {
			b.Fatal(err)
		}
		out.Release()
	}
	b.ReportMetric(float64(b.N)*10000/b.Elapsed().Seconds(), "rows/s")
}

// Rule 6: an update that leaves a TOASTed column unchanged keeps, in the same
// flush, the older row that carries the value; otherwise the pack would hold
// the marker and nothing to fill it from. The negative control drops it.
func TestResolveKeepsTOASTSource(t *testing.T) {
	for _, keepOn := range []bool{true, false} {
		t.Run(fmt.Sprintf("keep=%v", keepOn), func(t *testing.T) {
			keepToastSources = keepOn
			defer func() { keepToastSources = true }()
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			b := pt.Batch(mem, []pt.Row{
				{ID: 7, Op: proto.OpInsert, LSN: 10, Seq: 1},
				{ID: 7, Op: proto.OpUpdate, LSN: 11, Seq: 1},
				{ID: 7, Op: proto.OpUpdate, LSN: 12, Seq: 1, Unchanged: []string{"note"}},
				{ID: 8, Op: proto.OpInsert, LSN: 10, Seq: 2},
				{ID: 8, Op: proto.OpUpdate, LSN: 12, Seq: 2},
			})
			defer b.Release()
			out, _, err := Resolve(mem, []arrow.RecordBatch{b})
			if err != nil {
				t.Fatal(err)
			}
			defer out.Release()
			var sources int
			for _, r := range rows(out) {
				if r.id == 7 && r.unc == "" {
					sources++
				}
				if r.id == 8 && r.lsn != 12 {
					t.Errorf("key 8 has no unchanged markers: only its newest row belongs in the pack, got %v", r)
				}
			}
			if keepOn && sources != 2 {
				t.Fatalf("the rows that carry key 7's TOASTed value were dropped: %v", rows(out))
			}
			if !keepOn && sources != 0 {
				t.Fatalf("negative control: with the rule off the sources must be gone, got %v", rows(out))
			}
		})
	}
}

// Two rows of one key at one position (a reader replay that read a moved
// row's TOAST value once and found the row gone the second time) must leave
// the pack holding the row with the value: in the catalog they would share
// the whole sort key and a merge would keep either.
func TestResolveSamePositionPrefersValues(t *testing.T) {
	for _, order := range []string{"marked-last", "marked-first"} {
		t.Run(order, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			full := pt.Row{ID: 9, Op: proto.OpUpdate, LSN: 50, Seq: 3}
			marked := pt.Row{ID: 9, Op: proto.OpUpdate, LSN: 50, Seq: 3, Unchanged: []string{"note"}}
			rs := []pt.Row{full, marked}
			if order == "marked-first" {
				rs = []pt.Row{marked, full}
			}
			b := pt.Batch(mem, rs)
			defer b.Release()
			out, _, err := Resolve(mem, []arrow.RecordBatch{b})
			if err != nil {
				t.Fatal(err)
			}
			defer out.Release()
			got := rows(out)
			if len(got) != 1 || got[0].unc != "" {
				t.Fatalf("kept %v; want only the row that carries the value", got)
			}
		})
	}
}
