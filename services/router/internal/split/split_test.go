package split

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testSchema is a realistic CHANGES batch schema: source columns, then the
// system columns.
func testSchema(routing arrow.DataType) *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "tenant_id", Type: routing, Nullable: true},
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "paid", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "amount", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "blob", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: proto.ColOp, Type: arrow.PrimitiveTypes.Int8},
		{Name: proto.ColLSN, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColSeq, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColCommitTime, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{Name: proto.ColUnchanged, Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, func() *arrow.Metadata {
		m := arrow.NewMetadata([]string{proto.MetaTable, proto.MetaPrimaryKey, proto.MetaRouting}, []string{"public.orders", "id", "tenant_id"})
		return &m
	}())
}

// tenant is one routing value: nil is NULL.
type tenant = *string

func strp(s string) *string { return &s }

// genTenants returns a pool of routing values valid for the type.
func genTenants(r *rand.Rand, typ arrow.DataType, n int) []tenant {
	out := []tenant{nil}
	for i := range n {
		switch typ.ID() {
		case arrow.INT16:
			out = append(out, strp(strconv.Itoa(int(int16(r.Uint32())))))
		case arrow.INT32:
			out = append(out, strp(strconv.Itoa(int(int32(r.Uint32())))))
		case arrow.INT64:
			out = append(out, strp(strconv.FormatInt(int64(r.Uint64()), 10)))
		default:
			switch i % 6 {
			case 0:
				out = append(out, strp(fmt.Sprintf("shop%d", r.IntN(1e6))))
			case 1: // a uuid, its own name
				out = append(out, strp(fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff)))
			case 2: // needs the ~ encoding
				out = append(out, strp(fmt.Sprintf("acme.%d corp/ü", r.IntN(1e6))))
			case 3: // too long: unroutable
				out = append(out, strp(strings.Repeat("x.", 70+r.IntN(10))))
			case 4:
				out = append(out, strp(""))
			default: // 64 plain chars (the limit) or 65 (encoded)
				out = append(out, strp(strings.Repeat("a", 64+r.IntN(2))))
			}
		}
	}
	return out
}

type genRow struct {
	tenant tenant
	op     int8
	lsn    uint64
	seq    uint64
	id     int64
}

// genBatch builds a batch: random tenants (NULLs included), inserts,
// updates, deletes and routing mutations (an OpMoveOut row with the old
// tenant followed by an OpUpdate with the new one at the same position),
// then shuffles the rows when shuffle is set.
func genBatch(t testing.TB, r *rand.Rand, mem memory.Allocator, typ arrow.DataType, tenants []tenant, rows int, shuffle bool) (arrow.RecordBatch, []genRow) {
	t.Helper()
	var gr []genRow
	lsn := uint64(1 << 32)
	for len(gr) < rows {
		lsn += uint64(1 + r.IntN(3))
		seq := uint64(1 + r.IntN(5))
		pick := tenants[r.IntN(len(tenants))]
		id := int64(len(gr))
		if r.IntN(8) == 0 && len(gr)+2 <= rows {
			to := tenants[r.IntN(len(tenants))]
			gr = append(gr, genRow{tenant: pick, op: proto.OpMoveOut, lsn: lsn, seq: seq, id: id},
				genRow{tenant: to, op: proto.OpUpdate, lsn: lsn, seq: seq, id: id + 1})
			continue
		}
		gr = append(gr, genRow{tenant: pick, op: []int8{proto.OpInsert, proto.OpUpdate, proto.OpDelete}[r.IntN(3)], lsn: lsn, seq: seq, id: id})
	}
	if shuffle {
		r.Shuffle(len(gr), func(i, j int) { gr[i], gr[j] = gr[j], gr[i] })
	}
	b := array.NewRecordBuilder(mem, testSchema(typ))
	defer b.Release()
	for _, g := range gr {
		tb := b.Field(0)
		if g.tenant == nil {
			tb.AppendNull()
		} else {
			switch tb := tb.(type) {
			case *array.Int16Builder:
				v, _ := strconv.ParseInt(*g.tenant, 10, 16)
				tb.Append(int16(v))
			case *array.Int32Builder:
				v, _ := strconv.ParseInt(*g.tenant, 10, 32)
				tb.Append(int32(v))
			case *array.Int64Builder:
				v, _ := strconv.ParseInt(*g.tenant, 10, 64)
				tb.Append(v)
			case *array.StringBuilder:
				tb.Append(*g.tenant)
			}
		}
		b.Field(1).(*array.Int64Builder).Append(g.id)
		if r.IntN(5) == 0 {
			b.Field(2).AppendNull()
			b.Field(3).AppendNull()
			b.Field(4).AppendNull()
			b.Field(6).AppendNull()
		} else {
			b.Field(2).(*array.StringBuilder).Append(strings.Repeat("n", r.IntN(20)) + strconv.Itoa(int(g.id)))
			b.Field(3).(*array.BooleanBuilder).Append(g.id%3 == 0)
			b.Field(4).(*array.Float64Builder).Append(float64(g.id) / 7)
			b.Field(6).(*array.BinaryBuilder).Append([]byte{byte(g.id), byte(g.id >> 8)})
		}
		lb := b.Field(5).(*array.ListBuilder)
		if r.IntN(4) == 0 {
			lb.AppendNull()
		} else {
			lb.Append(true)
			for k := range r.IntN(4) {
				if k == 2 {
					lb.ValueBuilder().AppendNull()
					continue
				}
				lb.ValueBuilder().(*array.StringBuilder).Append(fmt.Sprintf("t%d.%d", g.id, k))
			}
		}
		b.Field(7).(*array.Int8Builder).Append(g.op)
		b.Field(8).(*array.Uint64Builder).Append(g.lsn)
		b.Field(9).(*array.Uint64Builder).Append(g.seq)
		b.Field(10).(*array.TimestampBuilder).Append(arrow.Timestamp(g.lsn))
		ub := b.Field(11).(*array.ListBuilder)
		if g.op == proto.OpUpdate && r.IntN(3) == 0 {
			ub.Append(true)
			ub.ValueBuilder().(*array.StringBuilder).Append("blob")
		} else {
			ub.AppendNull()
		}
	}
	return b.NewRecordBatch(), gr
}

// oracle routes one value the slow, obvious way.
func oracle(resolve Resolve, v tenant) Route {
	if v == nil {
		return Route{Action: DeadLetter}
	}
	return resolve(*v)
}

func rowStrings(rec arrow.RecordBatch, i int) string {
	var sb strings.Builder
	for c, col := range rec.Columns() {
		if c > 0 {
			sb.WriteByte('|')
		}
		if col.IsNull(i) {
			sb.WriteString("<null>")
			continue
		}
		sb.WriteString(col.ValueStr(i))
	}
	return sb.String()
}

// checkSplit asserts the split's properties against the input.
func checkSplit(resolve Resolve, in arrow.RecordBatch, gr []genRow, res *Result) error {
	byID := map[int64]int{} // id -> input row
	for i, g := range gr {
		byID[g.id] = i
	}
	seen := map[int64]string{} // id -> where it landed
	check := func(p Part, unroutable bool) error {
		ids := p.Batch.Column(1).(*array.Int64)
		first, last := proto.Position{LSN: ^proto.LSN(0), Seq: ^uint64(0)}, proto.Position{}
		for j := 0; j < ids.Len(); j++ {
			id := ids.Value(j)
			if where, dup := seen[id]; dup {
				return fmt.Errorf("row id %d is in %q and again in %q", id, where, p.Destination)
			}
			seen[id] = p.Destination
			i, ok := byID[id]
			if !ok {
				return fmt.Errorf("row id %d in %q was never input", id, p.Destination)
			}
			want := oracle(resolve, gr[i].tenant)
			switch {
			case unroutable && want.Action != DeadLetter:
				return fmt.Errorf("row id %d (tenant %v) dead-lettered, want %v %q", id, gr[i].tenant, want.Action, want.Destination)
			case !unroutable && (want.Action != Deliver || want.Destination != p.Destination):
				return fmt.Errorf("TENANT ISOLATION: row id %d (tenant %v) landed in %q, its value names %v %q", id, *gr[i].tenant, p.Destination, want.Action, want.Destination)
			}
			if got, want := rowStrings(p.Batch, j), rowStrings(in, i); got != want {
				return fmt.Errorf("row id %d changed on the way:\n got %s\nwant %s", id, got, want)
			}
			pos := proto.Position{LSN: proto.LSN(gr[i].lsn), Seq: gr[i].seq}
			if pos.Less(first) {
				first = pos
			}
			if last.Less(pos) {
				last = pos
			}
		}
		if p.First != first || p.Last != last {
			return fmt.Errorf("part %q: span %v..%v, want %v..%v", p.Destination, p.First, p.Last, first, last)
		}
		if !p.Batch.Schema().Equal(in.Schema()) || !p.Batch.Schema().Metadata().Equal(in.Schema().Metadata()) {
			return fmt.Errorf("part %q: schema changed", p.Destination)
		}
		return nil
	}
	dests := map[string]bool{}
	for _, p := range res.Parts {
		if dests[p.Destination] {
			return fmt.Errorf("destination %q has two parts", p.Destination)
		}
		dests[p.Destination] = true
		if p.Batch.NumRows() == 0 {
			return fmt.Errorf("empty part for %q", p.Destination)
		}
		if err := check(p, false); err != nil {
			return err
		}
	}
	if res.Unroutable != nil {
		if err := check(*res.Unroutable, true); err != nil {
			return err
		}
	}
	dropped, moveOuts := 0, 0
	for i, g := range gr {
		want := oracle(resolve, g.tenant)
		if want.Action == Drop {
			dropped++
			if _, ok := seen[g.id]; ok {
				return fmt.Errorf("row id %d should be dropped", g.id)
			}
			continue
		}
		if _, ok := seen[g.id]; !ok {
			return fmt.Errorf("row %d (id %d, tenant %v) was lost", i, g.id, g.tenant)
		}
		if g.op == proto.OpMoveOut {
			moveOuts++
		}
	}
	// A mutation pair: exactly one tombstone in the old destination and one
	// row in the new one.
	for _, g := range gr {
		if g.op != proto.OpMoveOut {
			continue
		}
		oldRow, newRow := g, gr[byID[g.id+1]]
		oldR, newR := oracle(resolve, oldRow.tenant), oracle(resolve, newRow.tenant)
		if oldR.Action == Deliver && seen[oldRow.id] != oldR.Destination {
			return fmt.Errorf("move-out id %d not in old destination %q", oldRow.id, oldR.Destination)
		}
		if newR.Action == Deliver && seen[newRow.id] != newR.Destination {
			return fmt.Errorf("moved-in id %d not in new destination %q", newRow.id, newR.Destination)
		}
	}
	if res.Dropped != dropped {
		return fmt.Errorf("dropped %d, want %d", res.Dropped, dropped)
	}
	if res.MoveOuts != countOp(gr, proto.OpMoveOut) {
		return fmt.Errorf("move-outs %d, want %d", res.MoveOuts, countOp(gr, proto.OpMoveOut))
	}
	if res.Rows != len(gr) {
		return fmt.Errorf("rows %d, want %d", res.Rows, len(gr))
	}
	_ = moveOuts
	return nil
}

func countOp(gr []genRow, op int8) int {
	n := 0
	for _, g := range gr {
		if g.op == op {
			n++
		}
	}
	return n
}

func TestSplitProperty(t *testing.T) {
	iters := 30
	if testing.Short() {
		iters = 15
	}
	splitProperty(t, iters)
}

// TestSplitPropertyChunked runs the property test with the chunked
// assignment forced on every batch, 1 to 7 chunks: chunk boundaries fall
// everywhere, also between a move-out row and its pair.
func TestSplitPropertyChunked(t *testing.T) {
	chunks, iters := []int{2, 7}, 10 // 1 chunk: TestChunkedMatchesSerial
	if testing.Short() {
		chunks, iters = []int{3}, 8
	}
	for _, c := range chunks {
		t.Run(fmt.Sprintf("chunks=%d", c), func(t *testing.T) {
			forceChunks = c
			defer func() { forceChunks = 0 }()
			splitProperty(t, iters)
		})
	}
}

func splitProperty(t *testing.T, iters int) {
	types := []arrow.DataType{arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64, arrow.BinaryTypes.String}
	listRes, err := List(map[string]string{"1": "one", "2": "one", "shop1": "s1", "": "empty"}, false)
	if err != nil {
		t.Fatal(err)
	}
	dropRes, _ := List(map[string]string{"1": "one", "shop1": "s1"}, true)
	for _, typ := range types {
		t.Run(typ.String(), func(t *testing.T) {
			// Half the iterations allocate from a Pool shared across
			// iterations: reused buffers hold the previous batch's bytes, so
			// any byte a kernel forgets to write shows up as a wrong value.
			pool := NewPool(1 << 30)
			for it := range iters {
				var base memory.Allocator = memory.NewGoAllocator()
				if it%2 == 1 {
					base = pool
				}
				mem := memory.NewCheckedAllocator(base)
				r := rand.New(rand.NewPCG(uint64(it), uint64(typ.ID())))
				tenants := genTenants(r, typ, 1+r.IntN(60))
				if it%5 == 0 { // the listed values appear too
					tenants = append(tenants, strp("1"), strp("2"))
					if typ.ID() == arrow.STRING {
						tenants = append(tenants, strp("shop1"), strp(""))
					}
				}
				rows := r.IntN(3000)
				if it%7 == 0 {
					rows = parallelMinRows + r.IntN(2000) // the parallel gather
				}
				resolve := Auto()
				switch it % 3 {
				case 1:
					resolve = listRes
				case 2:
					resolve = dropRes
				}
				workers := 1 + it%3
				rec, gr := genBatch(t, r, mem, typ, tenants, rows, it%2 == 0)
				in := rec
				// Sometimes split a slice of the batch: arrays with an offset.
				if it%4 == 3 && rows > 10 {
					lo := int64(r.IntN(rows / 2))
					in = rec.NewSlice(lo, int64(rows))
					gr = gr[lo:]
				}
				res, err := New(mem, resolve, workers).Split(in)
				if err != nil {
					t.Fatal(err)
				}
				if err := checkSplit(resolve, in, gr, res); err != nil {
					t.Fatal(err)
				}
				res.Release()
				if in != rec {
					in.Release()
				}
				rec.Release()
				mem.AssertSize(t, 0)
			}
		})
	}
}

func TestSplitMutationCounts(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	r := rand.New(rand.NewPCG(1, 2))
	a, b := strp("a"), strp("b")
	// move a->b (mutation), a primary-key change within a (no mutation).
	rec, _ := genBatchFixed(t, mem, []genRow{
		{tenant: a, op: proto.OpMoveOut, lsn: 10, seq: 1, id: 0},
		{tenant: b, op: proto.OpUpdate, lsn: 10, seq: 1, id: 1},
		{tenant: a, op: proto.OpMoveOut, lsn: 10, seq: 2, id: 2},
		{tenant: a, op: proto.OpUpdate, lsn: 10, seq: 2, id: 3},
	}, r)
	defer rec.Release()
	res, err := New(mem, Auto(), 1).Split(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	if res.MoveOuts != 2 || res.Mutations != 1 {
		t.Fatalf("move-outs %d mutations %d, want 2 and 1", res.MoveOuts, res.Mutations)
	}
	got := map[string]string{}
	for _, p := range res.Parts {
		ops := p.Batch.Column(7).(*array.Int8)
		for j := 0; j < ops.Len(); j++ {
			got[p.Destination] += strconv.Itoa(int(ops.Value(j)))
		}
	}
	if got["a"] != "442" || got["b"] != "2" {
		t.Fatalf("ops per destination %v, want a:442 b:2", got)
	}
}

func genBatchFixed(t testing.TB, mem memory.Allocator, gr []genRow, r *rand.Rand) (arrow.RecordBatch, []genRow) {
	t.Helper()
	tenants := []tenant{}
	for _, g := range gr {
		tenants = append(tenants, g.tenant)
	}
	rec, _ := genBatch(t, r, mem, arrow.BinaryTypes.String, tenants[:1], len(gr), false)
	defer rec.Release()
	// Rebuild the routing, op, lsn, seq and id columns from gr.
	cols := append([]arrow.Array(nil), rec.Columns()...)
	sb := array.NewStringBuilder(mem)
	ib := array.NewInt64Builder(mem)
	ob := array.NewInt8Builder(mem)
	lb := array.NewUint64Builder(mem)
	qb := array.NewUint64Builder(mem)
	for _, g := range gr {
		sb.Append(*g.tenant)
		ib.Append(g.id)
		ob.Append(g.op)
		lb.Append(g.lsn)
		qb.Append(g.seq)
	}
	built := []arrow.Array{sb.NewArray(), ib.NewArray(), ob.NewArray(), lb.NewArray(), qb.NewArray()}
	for _, b := range []interface{ Release() }{sb, ib, ob, lb, qb} {
		b.Release()
	}
	cols[0], cols[1], cols[7], cols[8], cols[9] = built[0], built[1], built[2], built[3], built[4]
	out := array.NewRecordBatch(rec.Schema(), cols, int64(len(gr)))
	for _, b := range built {
		b.Release()
	}
	return out, gr
}

func TestSplitRefusesBadBatches(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s := New(mem, Auto(), 1)
	mk := func(fields []arrow.Field, meta map[string]string) arrow.RecordBatch {
		md := arrow.MetadataFrom(meta)
		b := array.NewRecordBuilder(mem, arrow.NewSchema(fields, &md))
		defer b.Release()
		return b.NewRecordBatch()
	}
	sys := []arrow.Field{
		{Name: proto.ColOp, Type: arrow.PrimitiveTypes.Int8},
		{Name: proto.ColLSN, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColSeq, Type: arrow.PrimitiveTypes.Uint64},
	}
	cases := []struct {
		name   string
		fields []arrow.Field
		meta   map[string]string
		want   error
	}{
		{"no routing metadata", append([]arrow.Field{{Name: "tenant_id", Type: arrow.PrimitiveTypes.Int64}}, sys...), nil, ErrNoRoutingColumn},
		{"routing column missing", append([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, sys...), map[string]string{proto.MetaRouting: "tenant_id"}, ErrNoRoutingColumn},
		{"float routing column", append([]arrow.Field{{Name: "tenant_id", Type: arrow.PrimitiveTypes.Float64}}, sys...), map[string]string{proto.MetaRouting: "tenant_id"}, ErrRoutingType},
		{"no lsn", []arrow.Field{{Name: "tenant_id", Type: arrow.PrimitiveTypes.Int64}, sys[0], sys[2]}, map[string]string{proto.MetaRouting: "tenant_id"}, ErrSystemColumn},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := mk(c.fields, c.meta)
			defer rec.Release()
			_, err := s.Split(rec)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// TestSplitIsolationNegativeControl switches tenant isolation off (a
// move-out row follows its paired row to the new destination, the classic
// bug) and shows the property check catches it.
func TestSplitIsolationNegativeControl(t *testing.T) {
	for _, c := range []int{0, 3} {
		t.Run(fmt.Sprintf("chunks=%d", c), func(t *testing.T) {
			forceChunks = c
			defer func() { forceChunks = 0 }()
			isolationNegativeControl(t)
		})
	}
}

func isolationNegativeControl(t *testing.T) {
	unsafeMoveOutFollowsPair = true
	defer func() { unsafeMoveOutFollowsPair = false }()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	r := rand.New(rand.NewPCG(3, 3))
	typ := arrow.BinaryTypes.String
	tenants := []tenant{strp("a"), strp("b"), strp("c")}
	rec, gr := genBatch(t, r, mem, typ, tenants, 500, false)
	defer rec.Release()
	res, err := New(mem, Auto(), 1).Split(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	err = checkSplit(Auto(), rec, gr, res)
	if err == nil || !strings.Contains(err.Error(), "TENANT ISOLATION") {
		t.Fatalf("with move-outs routed by their pair the check passed (%v): it cannot see the rule", err)
	}
	t.Logf("negative control caught: %v", err)
}

// TestTakeShortValuesAcrossRuns hammers the utf8 fast path at run ends:
// many runs of tiny and empty values, compared with a naive permutation.
func TestTakeShortValuesAcrossRuns(t *testing.T) {
	for it := range 40 {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		r := rand.New(rand.NewPCG(uint64(it), 9))
		n := 1 + r.IntN(3000)
		runsN := 1 + r.IntN(400)
		b := array.NewStringBuilder(mem)
		vals := make([]string, n)
		for i := range vals {
			vals[i] = strings.Repeat(string(rune('a'+r.IntN(26))), []int{0, 0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 40, 48, 63, 64, 65, 90}[r.IntN(18)])
			b.Append(vals[i])
		}
		arr := b.NewArray()
		b.Release()
		ids := make([]int, n)
		counts := make([]int, runsN)
		for i := range ids {
			ids[i] = r.IntN(runsN)
			counts[ids[i]]++
		}
		starts := make([]int32, runsN)
		tot := 0
		for k, c := range counts {
			starts[k] = int32(tot)
			tot += c
		}
		cur := append([]int32(nil), starts...)
		inv, perm, ids32 := make([]int32, n), make([]int32, n), make([]int32, n)
		for i, k := range ids {
			ids32[i] = int32(k)
			inv[i], perm[cur[k]] = cur[k], int32(i)
			cur[k]++
		}
		out, err := take(mem, arr, inv, streams{ids: ids32, starts: starts})
		if err != nil {
			t.Fatal(err)
		}
		got := out.(*array.String)
		for j := 0; j < n; j++ {
			if got.Value(j) != vals[perm[j]] {
				t.Fatalf("iteration %d: row %d = %q, want %q", it, j, got.Value(j), vals[perm[j]])
			}
		}
		out.Release()
		arr.Release()
		mem.AssertSize(t, 0)
	}
}

// TestTakeListsAcrossRuns checks the list kernel (list of utf8 and of
// int64) against a naive permutation: NULL lists, empty lists, NULL elements, short and long
// values, many runs, on a sliced input (non-zero offsets at both levels).
func TestTakeListsAcrossRuns(t *testing.T) {
	for it := range 30 {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		r := rand.New(rand.NewPCG(uint64(it), 11))
		n := 1 + r.IntN(2000)
		runsN := 1 + r.IntN(300)
		sb := array.NewListBuilder(mem, arrow.BinaryTypes.String)
		ib := array.NewListBuilder(mem, arrow.PrimitiveTypes.Int64)
		for range n + 5 {
			if r.IntN(6) == 0 {
				sb.AppendNull()
				ib.AppendNull()
				continue
			}
			sb.Append(true)
			ib.Append(true)
			for range r.IntN(5) {
				if r.IntN(5) == 0 {
					sb.ValueBuilder().AppendNull()
					ib.ValueBuilder().AppendNull()
					continue
				}
				sb.ValueBuilder().(*array.StringBuilder).Append(strings.Repeat("x", []int{0, 1, 5, 15, 16, 17, 31, 32, 33, 70}[r.IntN(10)]))
				ib.ValueBuilder().(*array.Int64Builder).Append(r.Int64())
			}
		}
		for _, b := range []*array.ListBuilder{sb, ib} {
			full := b.NewArray()
			b.Release()
			arr := array.NewSlice(full, 3, int64(3+n)) // offset 3, child offset > 0
			full.Release()
			ids := make([]int32, n)
			counts := make([]int, runsN)
			for i := range ids {
				ids[i] = int32(r.IntN(runsN))
				counts[ids[i]]++
			}
			starts := make([]int32, runsN)
			tot := 0
			for k, c := range counts {
				starts[k] = int32(tot)
				tot += c
			}
			cur := append([]int32(nil), starts...)
			inv, perm := make([]int32, n), make([]int32, n)
			for i, k := range ids {
				inv[i], perm[cur[k]] = cur[k], int32(i)
				cur[k]++
			}
			out, err := take(mem, arr, inv, streams{ids: ids, starts: starts})
			if err != nil {
				t.Fatal(err)
			}
			for j := range n {
				k := int(perm[j])
				if out.IsNull(j) != arr.IsNull(k) || (!arr.IsNull(k) && out.ValueStr(j) != arr.ValueStr(k)) {
					t.Fatalf("iteration %d %s: row %d = %s, want %s", it, arr.DataType(), j, out.ValueStr(j), arr.ValueStr(k))
				}
			}
			if out.NullN() != arr.NullN() {
				t.Fatalf("iteration %d: %d nulls, want %d", it, out.NullN(), arr.NullN())
			}
			vals := out.(*array.List).ListValues()
			nulls := 0
			for i := range vals.Len() {
				if vals.IsNull(i) {
					nulls++
				}
			}
			if vals.NullN() != nulls {
				t.Fatalf("iteration %d %s: child null count %d, %d null elements", it, arr.DataType(), vals.NullN(), nulls)
			}
			out.Release()
			arr.Release()
		}
		mem.AssertSize(t, 0)
	}
}
