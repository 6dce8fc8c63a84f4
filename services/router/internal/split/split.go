package split

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/proto"
)

// maxReasons bounds the distinct dead-letter reasons a Result keeps.
const maxReasons = 8

// parallelMinRows is the batch size from which columns are gathered in
// parallel; below it the goroutine hand-off costs more than it saves.
const parallelMinRows = 32 << 10

// Splitter splits batches. It is safe for concurrent use.
type Splitter struct {
	mem     memory.Allocator
	resolve Resolve
	workers int
	scratch sync.Pool // *[]int32
	// distinct is the number of destinations of the last batch split: the
	// next batch's tables start at that size.
	distinct atomic.Int64
}

// New returns a Splitter that allocates output from mem, routes values with
// resolve, and gathers up to workers columns at once (<= 0: GOMAXPROCS).
func New(mem memory.Allocator, resolve Resolve, workers int) *Splitter {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &Splitter{mem: mem, resolve: resolve, workers: workers}
}

// Part is the rows of one batch bound for one destination, in input order.
type Part struct {
	Destination string            // "" for the unroutable part
	Batch       arrow.RecordBatch // zero-copy slice of the permuted batch, its columns built on first read; the input schema
	First, Last proto.Position    // smallest and largest position among the rows
	// Lo, Hi are the part's rows [Lo, Hi) in the permuted batch (see
	// Result.Window); Rank is what SplitBy's rank said of the destination.
	Lo, Hi int64
	Rank   int
}

// Result is one split batch. Release it once done with every part.
type Result struct {
	Rows       int      // input rows
	Parts      []Part   // one per destination, in order of first appearance (SplitBy: of rank, then name)
	Unroutable *Part    // rows for the dead-letter stream; nil when there are none
	Reasons    []string // distinct reasons of the unroutable rows (at most 8)
	Dropped    int      // rows of unlisted values dropped (mode list, unlisted: drop)
	MoveOuts   int      // OpMoveOut rows
	Mutations  int      // OpMoveOut rows whose paired row routes to another destination
	permuted   arrow.RecordBatch
}

// Release frees the permuted batch and every part.
func (r *Result) Release() {
	for _, p := range r.Parts {
		p.Batch.Release()
	}
	if r.Unroutable != nil {
		r.Unroutable.Batch.Release()
	}
	if r.permuted != nil {
		r.permuted.Release()
	}
	r.Parts, r.Unroutable, r.permuted = nil, nil, nil
}

// Window returns rows [lo, hi) of the permuted batch, every part's rows
// laid out part after part in Parts' order: consecutive parts are one
// zero-copy window. Release it; it stays valid after r.Release.
func (r *Result) Window(lo, hi int64) arrow.RecordBatch {
	if r.permuted == nil || lo < 0 || hi < lo || hi > r.permuted.NumRows() {
		return nil
	}
	return newPart(r.permuted, lo, hi)
}

// columns are the indices of the columns the split reads.
type columns struct {
	routing      int
	routingName  string
	op, lsn, seq int
}

func findColumns(s *arrow.Schema) (columns, error) {
	name, ok := s.Metadata().GetValue(proto.MetaRouting)
	if !ok || name == "" {
		return columns{}, fmt.Errorf("%w: schema metadata has no %s", ErrNoRoutingColumn, proto.MetaRouting)
	}
	c := columns{routingName: name}
	idx := func(col string, want arrow.Type) (int, error) {
		ix := s.FieldIndices(col)
		if len(ix) != 1 {
			return 0, fmt.Errorf("%w: %s appears %d times", ErrSystemColumn, col, len(ix))
		}
		if got := s.Field(ix[0]).Type.ID(); got != want {
			return 0, fmt.Errorf("%w: %s is %s, want %s", ErrSystemColumn, col, s.Field(ix[0]).Type, want)
		}
		return ix[0], nil
	}
	var err error
	if c.op, err = idx(proto.ColOp, arrow.INT8); err != nil {
		return c, err
	}
	if c.lsn, err = idx(proto.ColLSN, arrow.UINT64); err != nil {
		return c, err
	}
	if c.seq, err = idx(proto.ColSeq, arrow.UINT64); err != nil {
		return c, err
	}
	ix := s.FieldIndices(name)
	if len(ix) != 1 {
		return c, fmt.Errorf("%w: %s names column %q, which appears %d times", ErrNoRoutingColumn, proto.MetaRouting, name, len(ix))
	}
	c.routing = ix[0]
	return c, nil
}

// assigner turns routing values into buckets for one batch. Bucket 0 is the
// unroutable bucket; buckets 1.. are destinations; -1 is dropped.
type assigner struct {
	resolve Resolve
	column  string
	names   []string // bucket -> destination ("" for 0)
	byName  map[string]int32
	counts  []int
	reasons []string
	dropped int
	null    int32                        // bucket+2 of NULL, 0 until first seen
	rank    func(destination string) int // nil: buckets in order of first appearance
	ranks   []int                        // bucket -> rank, after reorder
	hint    int                          // distinct values expected (the tables' and byName's initial size)
}

// reorder renumbers the destination buckets (1..) by (rank, name) once
// every bucket is known, before the counting sort lays the rows out in
// bucket order. It returns old bucket -> new bucket, nil when there is no
// rank (or nothing to reorder). Bucket 0, the unroutable rows, stays 0.
func (a *assigner) reorder() []int32 {
	if a.rank == nil {
		return nil
	}
	nb := len(a.names)
	ranks := make([]int, nb)
	lo, hi := 0, 0
	for b := 1; b < nb; b++ {
		r := a.rank(a.names[b])
		ranks[b] = r
		if b == 1 || r < lo {
			lo = r
		}
		if b == 1 || r > hi {
			hi = r
		}
	}
	type key struct {
		name string
		old  int32
	}
	order := make([]key, nb-1) // new position -> old bucket, for 1..
	// Names are distinct: by name is a total order within a rank.
	byName := func(x, y key) int { return strings.Compare(x.name, y.name) }
	if span := hi - lo; span >= 0 && span <= 4*nb {
		// Ranks are few (the router's: partitions): the buckets are
		// counted out by rank, then each rank's sorted by name alone.
		at := make([]int, span+2)
		for b := 1; b < nb; b++ {
			at[ranks[b]-lo+1]++
		}
		for r := 1; r < len(at); r++ {
			at[r] += at[r-1]
		}
		starts := slices.Clone(at)
		for b := 1; b < nb; b++ {
			r := ranks[b] - lo
			order[at[r]] = key{a.names[b], int32(b)}
			at[r]++
		}
		for r := 0; r+1 < len(starts); r++ {
			slices.SortFunc(order[starts[r]:starts[r+1]], byName)
		}
	} else {
		for b := 1; b < nb; b++ {
			order[b-1] = key{a.names[b], int32(b)}
		}
		slices.SortFunc(order, func(x, y key) int {
			if c := cmp.Compare(ranks[x.old], ranks[y.old]); c != 0 {
				return c
			}
			return byName(x, y)
		})
	}
	remap := make([]int32, nb)
	names := make([]string, nb)
	counts := make([]int, nb)
	a.ranks = make([]int, nb)
	counts[0] = a.counts[0]
	for i, k := range order {
		old, b := k.old, int32(i+1)
		remap[old] = b
		names[b], counts[b], a.ranks[b] = a.names[old], a.counts[old], ranks[old]
	}
	a.names, a.counts = names, counts
	// Nothing routes after the reorder: the name map, numbered by the old
	// buckets, is dropped (a route now would panic, not misnumber).
	a.byName = nil
	return remap
}

// newAssigner returns an assigner sized for hint destinations.
func newAssigner(resolve Resolve, column string, hint int) *assigner {
	names := make([]string, 1, hint+1)
	counts := make([]int, 1, hint+1)
	return &assigner{resolve: resolve, column: column, names: names, byName: make(map[string]int32, hint), counts: counts, hint: hint}
}

func (a *assigner) reason(r string) {
	if len(a.reasons) >= maxReasons {
		return
	}
	for _, x := range a.reasons {
		if x == r {
			return
		}
	}
	a.reasons = append(a.reasons, r)
}

// route returns bucket+2 of a distinct value, resolving it.
func (a *assigner) route(value string) int32 {
	r := a.resolve(value)
	switch r.Action {
	case Deliver:
		if err := proto.ValidateDestination(r.Destination); err != nil {
			a.reason(fmt.Sprintf("%s value %q: %v", a.column, value, err))
			return 2
		}
		if b, ok := a.byName[r.Destination]; ok {
			return b + 2
		}
		b := int32(len(a.names))
		a.names = append(a.names, r.Destination)
		a.counts = append(a.counts, 0)
		a.byName[r.Destination] = b
		return b + 2
	case Drop:
		return 1
	default:
		a.reason(r.Reason)
		return 2
	}
}

func (a *assigner) nullBucket() int32 {
	if a.null == 0 {
		a.reason("NULL routing value in column " + a.column)
		a.null = 2
	}
	return a.null
}

// count records bucket+2 v for a row and returns the bucket.
func (a *assigner) count(v int32) int32 {
	b := v - 2
	if b >= 0 {
		a.counts[b]++
	} else {
		a.dropped++
	}
	return b
}

type integer interface{ ~int16 | ~int32 | ~int64 }

func assignInts[T integer](a *assigner, arr arrow.Array, vals []T, ids []int32) {
	t := newIntTable(a.hint)
	hasNulls := arr.NullN() > 0
	var lastK int64
	var lastV int32 // 0: no previous value
	for i, x := range vals {
		if hasNulls && arr.IsNull(i) {
			ids[i] = a.count(a.nullBucket())
			continue
		}
		k := int64(x)
		v := lastV
		if v == 0 || k != lastK {
			v = t.get(k)
			if v == 0 {
				v = a.route(strconv.FormatInt(k, 10))
				t.put(k, v)
			}
			lastK, lastV = k, v
		}
		ids[i] = a.count(v)
	}
}

func assignStrings(a *assigner, arr *array.String, ids []int32) {
	offs := arr.ValueOffsets()
	var data []byte
	if b := arr.Data().Buffers()[2]; b != nil {
		data = b.Bytes()
	}
	t := newBytesTable(data, a.hint)
	hasNulls := arr.NullN() > 0
	var last []byte
	var lastV int32
	for i := range ids {
		if hasNulls && arr.IsNull(i) {
			ids[i] = a.count(a.nullBucket())
			continue
		}
		s, e := offs[i], offs[i+1]
		val := data[s:e]
		v := lastV
		if v == 0 || string(val) != string(last) {
			h := t.hash(val)
			v = t.get(h, val)
			if v == 0 {
				v = a.route(string(val))
				t.put(h, int64(s), int64(e), v)
			}
			last, lastV = val, v
		}
		ids[i] = a.count(v)
	}
}

// assignSerial is the one-pass routing and counting sort (small batches,
// one worker, and the benchmark's baseline): it fills a.counts, ids (bucket
// per row, the dropped rows' run for dropped rows) and inv (each row's index
// after the stable sort by bucket) and returns the buckets' first new rows.
func (s *Splitter) assignSerial(a *assigner, routing arrow.Array, rec arrow.RecordBatch, cols columns, ids, inv []int32) []int {
	switch col := routing.(type) {
	case *array.Int16:
		assignInts(a, col, col.Int16Values(), ids)
	case *array.Int32:
		assignInts(a, col, col.Int32Values(), ids)
	case *array.Int64:
		assignInts(a, col, col.Int64Values(), ids)
	case *array.String:
		assignStrings(a, col, ids)
	}
	if unsafeMoveOutFollowsPair {
		breakIsolation(rec, cols, ids, a)
	}
	if remap := a.reorder(); remap != nil {
		for i, b := range ids {
			if b >= 0 {
				ids[i] = remap[b]
			}
		}
	}
	// Stable counting sort of row indices by bucket: inv[i] is row i's new
	// index. Dropped rows go after every bucket (and are never sliced), so
	// inv is a bijection on [0, n) and the take needs no per-row branch.
	starts := make([]int, len(a.counts))
	total := 0
	for b, c := range a.counts {
		starts[b] = total
		total += c
	}
	cur := make([]int, len(starts))
	copy(cur, starts)
	dropAt := total
	dropRun := int32(len(starts)) // the dropped rows' run, after every bucket
	for i, b := range ids {
		q := dropAt
		if b >= 0 {
			q = cur[b]
			cur[b]++
		} else {
			dropAt++
			ids[i] = dropRun
		}
		inv[i] = int32(q)
	}
	return starts
}

func (s *Splitter) getScratch(n int) *[]int32 {
	if p, ok := s.scratch.Get().(*[]int32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	b := make([]int32, n)
	return &b
}

// Split routes every row of rec by its own routing value. rec is not
// retained. An error describes the batch (see errors.go).
func (s *Splitter) Split(rec arrow.RecordBatch) (*Result, error) { return s.SplitBy(rec, nil) }

// SplitBy is Split with the parts (and their rows in the permuted batch)
// ordered by rank(destination), then by destination name, instead of by
// first appearance: the router ranks by partition, so the parts of one
// partition are one contiguous window (Result.Window). rank is called once
// per destination of the batch; its value is kept in Part.Rank.
func (s *Splitter) SplitBy(rec arrow.RecordBatch, rank func(destination string) int) (*Result, error) {
	cols, err := findColumns(rec.Schema())
	if err != nil {
		return nil, err
	}
	n := int(rec.NumRows())
	res := &Result{Rows: n}
	// Sized for the destinations of the last batch (at most a row each):
	// at 10,000 tenants the tables and the name map otherwise grow and
	// rehash a dozen times per batch.
	a := newAssigner(s.resolve, cols.routingName, min(int(s.distinct.Load()), n))
	a.rank = rank

	routing := rec.Column(cols.routing)
	switch routing.(type) {
	case *array.Int16, *array.Int32, *array.Int64, *array.String:
	default:
		return nil, fmt.Errorf("%w: column %s is %s (want int16, int32, int64 or utf8)", ErrRoutingType, cols.routingName, routing.DataType())
	}
	idsp := s.getScratch(n)
	defer s.scratch.Put(idsp)
	ids := *idsp
	invp := s.getScratch(n)
	defer s.scratch.Put(invp)
	inv := *invp
	var starts []int
	if nc := s.chunksFor(n); nc > 0 {
		starts = s.assignChunked(a, routing, rec, cols, ids, inv, nc)
	} else {
		starts = s.assignSerial(a, routing, rec, cols, ids, inv)
	}
	s.distinct.Store(int64(len(a.names) - 1))
	res.Dropped = a.dropped
	res.Reasons = a.reasons
	total := 0
	for _, c := range a.counts {
		total += c
	}
	runs := make([]int32, len(starts)+1)
	for b, st := range starts {
		runs[b] = int32(st)
	}
	runs[len(starts)] = int32(total) // the dropped rows' run

	// The move-out count and the parts' spans read the input in its order;
	// they run as one more task beside the columns' take.
	var spans []posSpan
	side := func() {
		s.countMoveOuts(rec, cols, ids, res)
		spans = bucketSpans(rec, cols, ids, len(a.counts))
	}
	permuted, err := s.takeRecord(rec, inv, streams{ids: ids, starts: runs}, side)
	if err != nil {
		return nil, err
	}
	res.permuted = permuted
	res.Parts = make([]Part, 0, len(a.names)-1)
	// The parts' windows in one allocation: at 10,000 destinations a batch
	// has 10,000 parts.
	recs := make([]partRecord, len(a.counts))
	for b, c := range a.counts {
		if c == 0 {
			continue
		}
		lo, hi := starts[b], starts[b]+c
		p := Part{Destination: a.names[b], Batch: initPart(&recs[b], permuted, int64(lo), int64(hi)), Lo: int64(lo), Hi: int64(hi)}
		if a.ranks != nil {
			p.Rank = a.ranks[b]
		}
		p.First, p.Last = spans[b].first, spans[b].last
		if b == 0 {
			// A copy: &p itself would move p to the heap for every part
			// (10,000 a batch at 10,000 destinations), not just this one.
			u := p
			res.Unroutable = &u
			continue
		}
		res.Parts = append(res.Parts, p)
	}
	return res, nil
}

// span returns the smallest and largest position of the rows.
func span(lsns, seqs []uint64) (first, last proto.Position) {
	first = proto.Position{LSN: proto.LSN(lsns[0]), Seq: seqs[0]}
	last = first
	for i := 1; i < len(lsns); i++ {
		p := proto.Position{LSN: proto.LSN(lsns[i]), Seq: seqs[i]}
		if p.Less(first) {
			first = p
		}
		if last.Less(p) {
			last = p
		}
	}
	return first, last
}

type posSpan struct{ first, last proto.Position }

// bucketSpans returns the smallest and largest position of every bucket's
// rows (ids[i] >= nb, the dropped rows, are skipped), in one pass over the
// input.
func bucketSpans(rec arrow.RecordBatch, cols columns, ids []int32, nb int) []posSpan {
	lsns := rec.Column(cols.lsn).(*array.Uint64).Uint64Values()
	seqs := rec.Column(cols.seq).(*array.Uint64).Uint64Values()
	spans := make([]posSpan, nb)
	seen := make([]bool, nb)
	ids = ids[:len(lsns)]
	seqs = seqs[:len(lsns)]
	for i, l := range lsns {
		b := int(ids[i])
		if b >= nb {
			continue
		}
		p := proto.Position{LSN: proto.LSN(l), Seq: seqs[i]}
		sp := &spans[b]
		if !seen[b] {
			seen[b] = true
			sp.first, sp.last = p, p
			continue
		}
		if p.Less(sp.first) {
			sp.first = p
		}
		if sp.last.Less(p) {
			sp.last = p
		}
	}
	return spans
}

// countMoveOuts counts OpMoveOut rows and, among them, routing mutations:
// those whose paired row (adjacent, same position, not a move-out) routes
// to another bucket, or that have no adjacent pair.
func (s *Splitter) countMoveOuts(rec arrow.RecordBatch, cols columns, ids []int32, res *Result) {
	ops := rec.Column(cols.op).(*array.Int8).Int8Values()
	lsns := rec.Column(cols.lsn).(*array.Uint64).Uint64Values()
	seqs := rec.Column(cols.seq).(*array.Uint64).Uint64Values()
	pair := func(i, j int) bool {
		return j >= 0 && j < len(ops) && ops[j] != proto.OpMoveOut && lsns[j] == lsns[i] && seqs[j] == seqs[i]
	}
	for i, op := range ops {
		if op != proto.OpMoveOut {
			continue
		}
		res.MoveOuts++
		switch {
		case pair(i, i+1):
			if ids[i+1] != ids[i] {
				res.Mutations++
			}
		case pair(i, i-1):
			if ids[i-1] != ids[i] {
				res.Mutations++
			}
		default:
			res.Mutations++
		}
	}
}

// takeRecord gathers every column of rec with perm, columns in parallel.
// side, when not nil, runs once as one more task (it must not fail).
func (s *Splitter) takeRecord(rec arrow.RecordBatch, inv []int32, st streams, side func()) (arrow.RecordBatch, error) {
	out := make([]arrow.Array, rec.NumCols())
	release := func() {
		for _, c := range out {
			if c != nil {
				c.Release()
			}
		}
	}
	if s.workers <= 1 || len(inv) < parallelMinRows || len(out) == 1 {
		if side != nil {
			side()
		}
		for i, c := range rec.Columns() {
			t, err := take(s.mem, c, inv, st)
			if err != nil {
				release()
				return nil, fmt.Errorf("gathering column %s: %w", rec.ColumnName(i), err)
			}
			out[i] = t
		}
	} else {
		var g errgroup.Group
		g.SetLimit(s.workers)
		if side != nil {
			g.Go(func() error { side(); return nil })
		}
		for _, i := range heavyFirst(rec.Schema()) {
			c := rec.Column(i)
			g.Go(func() error {
				t, err := take(s.mem, c, inv, st)
				if err != nil {
					return fmt.Errorf("gathering column %s: %w", rec.ColumnName(i), err)
				}
				out[i] = t
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			release()
			return nil, err
		}
	}
	r := array.NewRecordBatch(rec.Schema(), out, int64(len(inv)))
	release() // the record retained them
	return r, nil
}

// heavyFirst orders the column indices by the kernel's expected cost,
// costliest first, so the last column a worker picks up is a short one.
func heavyFirst(s *arrow.Schema) []int {
	cost := func(dt arrow.DataType) int {
		switch dt.ID() {
		case arrow.LIST, arrow.LARGE_LIST, arrow.STRUCT, arrow.MAP, arrow.DICTIONARY:
			return 3
		case arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY:
			return 2
		default:
			return 1
		}
	}
	order := make([]int, s.NumFields())
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return cost(s.Field(order[a]).Type) > cost(s.Field(order[b]).Type) })
	return order
}

// Span returns the smallest and largest position of a batch's rows (read
// from its _sluice_lsn and _sluice_seq columns); zero positions when the
// batch is empty or lacks them.
func Span(b arrow.RecordBatch) (first, last proto.Position) {
	s := b.Schema()
	li, si := s.FieldIndices(proto.ColLSN), s.FieldIndices(proto.ColSeq)
	if b.NumRows() == 0 || len(li) != 1 || len(si) != 1 {
		return first, last
	}
	l, ok1 := b.Column(li[0]).(*array.Uint64)
	q, ok2 := b.Column(si[0]).(*array.Uint64)
	if !ok1 || !ok2 {
		return first, last
	}
	return span(l.Uint64Values(), q.Uint64Values())
}

// unsafeMoveOutFollowsPair routes an OpMoveOut row to its paired row's
// destination instead of its own: it breaks tenant isolation and exists only
// for the negative control of the property test.
var unsafeMoveOutFollowsPair = false

func breakIsolation(rec arrow.RecordBatch, cols columns, ids []int32, a *assigner) {
	ops := rec.Column(cols.op).(*array.Int8).Int8Values()
	for i := 0; i+1 < len(ops); i++ {
		if ops[i] == proto.OpMoveOut && ids[i] >= 0 && ids[i+1] >= 0 {
			a.counts[ids[i]]--
			ids[i] = ids[i+1]
			a.counts[ids[i]]++
		}
	}
}
