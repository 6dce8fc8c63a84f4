package resolve

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// model is an independent statement of Resolve's rule over rows in input
// order: per id the newest position wins (ties: the later row unless it
// carries more TOAST markers); a key whose winner carries markers keeps
// every row; the kept rows ordered by position, then input order.
func model(in []pt.Row) []got {
	best := map[int64]int{}
	for i, r := range in {
		j, ok := best[r.ID]
		if !ok {
			best[r.ID] = i
			continue
		}
		a, b := proto.Position{LSN: proto.LSN(in[j].LSN), Seq: in[j].Seq}, proto.Position{LSN: proto.LSN(r.LSN), Seq: r.Seq}
		if c := a.Compare(b); c < 0 || (c == 0 && len(r.Unchanged) <= len(in[j].Unchanged)) {
			best[r.ID] = i
		}
	}
	var keep []int
	for i, r := range in {
		w := best[r.ID]
		if w == i || len(in[w].Unchanged) > 0 {
			keep = append(keep, i)
		}
	}
	slices.SortStableFunc(keep, func(a, b int) int {
		return proto.Position{LSN: proto.LSN(in[a].LSN), Seq: in[a].Seq}.Compare(proto.Position{LSN: proto.LSN(in[b].LSN), Seq: in[b].Seq})
	})
	out := []got{}
	for _, i := range keep {
		r := in[i]
		u := ""
		if len(r.Unchanged) > 0 {
			u = fmt.Sprintf("%q", r.Unchanged)
			u = "[" + u[1:len(u)-1] + "]"
		}
		out = append(out, got{r.ID, r.Op, r.LSN, u})
	}
	return out
}

// withDestination is rec with a leading utf8 column naming each row's
// destination, as a partition message carries it.
func withDestination(mem memory.Allocator, rec arrow.RecordBatch, dests []string) arrow.RecordBatch {
	b := array.NewStringBuilder(mem)
	defer b.Release()
	b.AppendValues(dests, nil)
	d := b.NewArray()
	defer d.Release()
	md := rec.Schema().Metadata()
	fields := append([]arrow.Field{{Name: proto.ColDestination, Type: arrow.BinaryTypes.String}}, rec.Schema().Fields()...)
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), append([]arrow.Array{d}, rec.Columns()...), rec.NumRows())
}

// TestPlanGatherMatchesModel resolves one destination's slices of several
// shared message batches (each also holding other destinations' rows and
// a destination column) in place, and compares with the model over the
// same rows materialized.
func TestPlanGatherMatchesModel(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng := rand.New(rand.NewSource(7))
	ops := []int8{proto.OpInsert, proto.OpUpdate, proto.OpDelete}
	for trial := 0; trial < 300; trial++ {
		var msgs []arrow.RecordBatch
		var spans []Span
		var mine []pt.Row // the destination's rows, in span order
		for m := 0; m < 1+rng.Intn(5); m++ {
			var rows []pt.Row
			var dests []string
			for _, d := range []string{"a", "me", "z"} {
				for k := 0; k < rng.Intn(4); k++ {
					r := pt.Row{ID: int64(rng.Intn(4)), Op: ops[rng.Intn(3)], LSN: uint64(1 + rng.Intn(6)), Seq: uint64(rng.Intn(2))}
					if r.Op == proto.OpUpdate && rng.Intn(3) == 0 {
						r.Unchanged = []string{"note"}
					}
					if d == "me" {
						mine = append(mine, r)
					}
					rows, dests = append(rows, r), append(dests, d)
				}
			}
			if len(rows) == 0 {
				continue
			}
			b := pt.Batch(mem, rows)
			rec := withDestination(mem, b, dests)
			b.Release()
			msgs = append(msgs, rec)
			lo := slices.Index(dests, "me")
			if lo < 0 {
				continue
			}
			hi := lo
			for hi < len(dests) && dests[hi] == "me" {
				hi++
			}
			spans = append(spans, Span{Rec: rec, Lo: int64(lo), Hi: int64(hi)})
		}
		if len(spans) > 0 {
			keep, st, err := Plan(pt.Schema(), spans)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Gather(mem, pt.Schema(), spans, keep)
			if err != nil {
				t.Fatal(err)
			}
			want := model(mine)
			if g := rows(out); fmt.Sprint(g) != fmt.Sprint(want) || st.In != int64(len(mine)) || st.Out != int64(len(want)) {
				t.Fatalf("trial %d: rows %v\ngot  %v (stats %+v)\nwant %v", trial, mine, g, st, want)
			}
			if !out.Schema().Equal(pt.Schema()) {
				t.Fatalf("trial %d: schema %v", trial, out.Schema())
			}
			out.Release()
		}
		for _, m := range msgs {
			m.Release()
		}
	}
}

// TestGatherCompactsSparseBatches: a span using few rows of a large batch
// is copied out, not concatenated whole (and the result is the same).
func TestGatherCompactsSparseBatches(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	var in []pt.Row
	var dests []string
	for i := 0; i < 1000; i++ {
		d := "other"
		if i == 500 || i == 501 {
			d = "me"
		}
		in, dests = append(in, pt.Row{ID: int64(i), Op: proto.OpInsert, LSN: uint64(i + 1)}), append(dests, d)
	}
	b := pt.Batch(mem, in)
	rec := withDestination(mem, b, dests)
	b.Release()
	defer rec.Release()
	spans := []Span{{Rec: rec, Lo: 500, Hi: 502}}
	keep, _, err := Plan(pt.Schema(), spans)
	if err != nil {
		t.Fatal(err)
	}
	before := mem.CurrentAlloc()
	out, err := Gather(mem, pt.Schema(), spans, keep)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	if g := rows(out); len(g) != 2 || g[0].id != 500 || g[1].id != 501 {
		t.Fatalf("got %v", g)
	}
	if grew := mem.CurrentAlloc() - before; grew > 4<<10 {
		t.Fatalf("gathering 2 rows of 1,000 holds %d bytes: the batch was copied whole", grew)
	}
}
