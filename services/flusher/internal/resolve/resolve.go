package resolve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
)

// ErrSchema marks batches resolve cannot read (missing system or key
// columns). It is permanent for the batches concerned.
var ErrSchema = errors.New("unresolvable batch schema")

// Stats says what resolution did.
type Stats struct {
	In, Out    int64 // rows before and after
	Tombstones int64 // tombstones kept
}

// Resolve merges recs (all with one schema) into one batch holding, per
// primary key (proto.MetaPrimaryKey of the schema metadata), only the row
// with the newest position (ties: the later row) — except that when that
// row marks TOASTed columns as unchanged (_sluice_unchanged), the key's
// older rows stay too: they carry the values the catalog fills in (rule 6). Kept rows are ordered by
// position. A schema without a primary key keeps every row. The caller
// releases the result; recs are not released. It is Plan over the whole of
// each batch, then Gather.
func Resolve(mem memory.Allocator, recs []arrow.RecordBatch) (arrow.RecordBatch, Stats, error) {
	if len(recs) == 0 {
		return nil, Stats{}, fmt.Errorf("resolving: %w: no batches", ErrSchema)
	}
	spans := make([]Span, len(recs))
	for i, r := range recs {
		if sc := r.Schema(); sc != recs[0].Schema() && !sc.Equal(recs[0].Schema()) { // identity first: slices of one message share it
			return nil, Stats{}, fmt.Errorf("resolving: %w: batches with different schemas", ErrSchema)
		}
		spans[i] = Span{Rec: r, Lo: 0, Hi: r.NumRows()}
	}
	keep, st, err := Plan(recs[0].Schema(), spans)
	if err != nil {
		return nil, st, err
	}
	out, err := Gather(mem, recs[0].Schema(), spans, keep)
	return out, st, err
}

// Span is rows [Lo, Hi) of Rec: a destination's slice of a message batch,
// read in place. Rec may hold columns the resolved rows do not (a
// partition message's proto.ColDestination); columns are found by name.
type Span struct {
	Rec    arrow.RecordBatch
	Lo, Hi int64
	// Cols are Rec's columns as Plan reads them (ColumnsOf), found once
	// for a batch many spans share; nil: found by Plan.
	Cols *Columns
}

// Columns are the columns Plan reads of one batch.
type Columns struct{ c spanCols }

// ColumnsOf finds the columns Plan reads of rec, whose rows have schema's
// primary key (proto.MetaPrimaryKey).
func ColumnsOf(rec arrow.RecordBatch, schema *arrow.Schema) (*Columns, error) {
	c, err := columnsOf(rec, primaryKey(schema))
	if err != nil {
		return nil, err
	}
	return &Columns{c}, nil
}

// primaryKey is the primary key columns schema's metadata names
// (proto.PrimaryKey: a list, so a name holding a comma or edge spaces
// stays whole). Metadata that does not decode names no key: the columns
// it names are then not found (columnsOf) or every row is kept.
func primaryKey(schema *arrow.Schema) []string {
	pk, _ := proto.PrimaryKey(schema.Metadata())
	return pk
}

// Ref is one row of a Plan's spans: row Row of spans[Span].Rec.
type Ref struct{ Span, Row int32 }

// Plan is Resolve's decision without its copy: which rows of spans (all of
// schema's columns, schema giving the primary key) survive, ordered by
// position (ties: span order, then row order). Gather makes them a batch.
// Nothing is allocated per column, so resolving many small slices of a
// few shared message batches costs per row, not per slice.
func Plan(schema *arrow.Schema, spans []Span) ([]Ref, Stats, error) {
	var st Stats
	if len(spans) == 0 {
		return nil, st, fmt.Errorf("resolving: %w: no batches", ErrSchema)
	}
	pk := primaryKey(schema)
	cols := make([]spanCols, len(spans))
	n := 0
	for k, s := range spans {
		if s.Lo < 0 || s.Hi > s.Rec.NumRows() || s.Lo > s.Hi {
			return nil, st, fmt.Errorf("resolving: %w: rows [%d, %d) of a batch of %d", ErrSchema, s.Lo, s.Hi, s.Rec.NumRows())
		}
		n += int(s.Hi - s.Lo)
		if s.Cols != nil {
			cols[k] = s.Cols.c
			continue
		}
		if k > 0 && s.Rec == spans[k-1].Rec {
			cols[k] = cols[k-1]
			continue
		}
		c, err := columnsOf(s.Rec, pk)
		if err != nil {
			return nil, st, err
		}
		cols[k] = c
	}
	st.In = int64(n)
	all := make([]Ref, 0, n)
	for k, s := range spans {
		for r := s.Lo; r < s.Hi; r++ {
			all = append(all, Ref{int32(k), int32(r)})
		}
	}
	pos := func(r Ref) proto.Position {
		c := cols[r.Span]
		return proto.Position{LSN: proto.LSN(c.lsn.Value(int(r.Row))), Seq: c.seq.Value(int(r.Row))}
	}
	var keep []Ref
	if len(pk) == 0 {
		keep = all
	} else {
		best := make(map[string]int, n)
		var kb []byte
		key := func(r Ref) []byte {
			kb = kb[:0]
			for _, c := range cols[r.Span].key {
				kb = appendKey(kb, c, int(r.Row))
			}
			return kb
		}
		for i, r := range all {
			kb := key(r)
			j, ok := best[string(kb)]
			if !ok {
				best[string(kb)] = i
				continue
			}
			// Newest position wins; at the same position (a replay that
			// saw the source differently) the later row wins unless it
			// leaves more TOAST values unchanged: two rows with one key and
			// one position in one pack collapse in the catalog's merge, so
			// the one that carries the values must be the one kept (rule 6).
			if c := pos(all[j]).Compare(pos(r)); c < 0 || (c == 0 && cols[r.Span].markers(int(r.Row)) <= cols[all[j].Span].markers(int(all[j].Row))) {
				best[string(kb)] = i
			}
		}
		idx := make([]int, 0, len(best))
		for _, i := range best {
			idx = append(idx, i)
		}
		idx = append(idx, toastSources(all, cols, key, best)...)
		if len(idx) == n {
			keep = all // every row survives (the common case): no copy
		} else {
			slices.Sort(idx)
			keep = make([]Ref, len(idx))
			for k, i := range idx {
				keep[k] = all[i]
			}
		}
	}
	// all is in (span, row) order: a stable sort by position keeps ties in
	// that order.
	slices.SortStableFunc(keep, func(a, b Ref) int { return pos(a).Compare(pos(b)) })
	for _, r := range keep {
		if proto.IsTombstone(cols[r.Span].op.Value(int(r.Row))) {
			st.Tombstones++
		}
	}
	st.Out = int64(len(keep))
	return keep, st, nil
}

// spanCols are the columns Plan reads of one span's batch.
type spanCols struct {
	lsn, seq *array.Uint64
	op       *array.Int8
	key      []arrow.Array
	unch     *array.List // nil: no _sluice_unchanged column
}

func columnsOf(rec arrow.RecordBatch, pk []string) (spanCols, error) {
	var c spanCols
	var err error
	if c.lsn, c.seq, c.op, err = systemCols(rec); err != nil {
		return c, err
	}
	sc := rec.Schema()
	for _, name := range pk {
		idx := sc.FieldIndices(name)
		if len(idx) != 1 {
			return c, fmt.Errorf("resolving: %w: primary key column %q not in the batch", ErrSchema, name)
		}
		c.key = append(c.key, rec.Column(idx[0]))
	}
	if idx := sc.FieldIndices(proto.ColUnchanged); len(idx) == 1 {
		c.unch, _ = rec.Column(idx[0]).(*array.List)
	}
	return c, nil
}

// markers is how many TOAST-unchanged markers row i carries.
func (c spanCols) markers(i int) int {
	if c.unch == nil || c.unch.IsNull(i) {
		return 0
	}
	start, end := c.unch.ValueOffsets(i)
	return int(end - start)
}

// Gather makes the rows keep names (of spans) one batch of schema's
// columns, in keep's order: each span's batch read in place when keep
// uses most of it, else first compacted to the rows it gives, then every
// batch concatenated once and taken from once per column. A single span
// given whole is returned as is (retained). The caller releases the
// result.
func Gather(mem memory.Allocator, schema *arrow.Schema, spans []Span, keep []Ref) (arrow.RecordBatch, error) {
	// The distinct batches, in first-use order, and the rows used of each.
	type source struct {
		rec  arrow.RecordBatch
		used []int32 // rows of rec keep uses, ascending, distinct
		base int32   // first row of its rows in the concatenation
		at   map[int32]int32
	}
	var srcs []*source
	bySpan := make([]*source, len(spans))
	byRec := map[arrow.RecordBatch]*source{}
	for k, s := range spans {
		src, ok := byRec[s.Rec]
		if !ok {
			src = &source{rec: s.Rec}
			byRec[s.Rec] = src
			srcs = append(srcs, src)
		}
		bySpan[k] = src
	}
	for _, r := range keep {
		s := bySpan[r.Span]
		s.used = append(s.used, r.Row)
	}
	if len(srcs) == 1 && int64(len(keep)) == srcs[0].rec.NumRows() && sortedRows(keep) {
		if rec := srcs[0].rec; rec.Schema() == schema || rec.Schema().Equal(schema) {
			rec.Retain()
			return rec, nil
		}
	}
	var parts []arrow.RecordBatch
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	var base int32
	for _, s := range srcs {
		slices.Sort(s.used)
		s.used = slices.Compact(s.used)
		view, err := project(schema, s.rec)
		if err != nil {
			return nil, err
		}
		if int64(len(s.used))*2 < s.rec.NumRows() {
			// Mostly other destinations' rows: copy out only these.
			compact, err := take(mem, view, s.used)
			view.Release()
			if err != nil {
				return nil, err
			}
			s.at = make(map[int32]int32, len(s.used))
			for i, r := range s.used {
				s.at[r] = int32(i)
			}
			view = compact
		}
		s.base = base
		base += int32(view.NumRows())
		parts = append(parts, view)
	}
	idx := make([]int32, len(keep))
	for i, r := range keep {
		s := bySpan[r.Span]
		if s.at != nil {
			idx[i] = s.base + s.at[r.Row]
		} else {
			idx[i] = s.base + r.Row
		}
	}
	all, err := concat(mem, schema, parts)
	if err != nil {
		return nil, err
	}
	defer all.Release()
	if len(idx) == int(all.NumRows()) && slices.IsSorted(idx) {
		all.Retain()
		return all, nil
	}
	return take(mem, all, idx)
}

func sortedRows(keep []Ref) bool {
	for i, r := range keep {
		if r.Span != 0 || int(r.Row) != i {
			return false
		}
	}
	return true
}

// project is rec's columns named by schema, as a batch of schema (zero
// copy).
func project(schema *arrow.Schema, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	if rec.Schema() == schema {
		rec.Retain()
		return rec, nil
	}
	sc := rec.Schema()
	cols := make([]arrow.Array, schema.NumFields())
	for i, f := range schema.Fields() {
		idx := sc.FieldIndices(f.Name)
		if len(idx) != 1 || !arrow.TypeEqual(sc.Field(idx[0]).Type, f.Type) {
			return nil, fmt.Errorf("resolving: %w: column %s missing or of another type", ErrSchema, f.Name)
		}
		cols[i] = rec.Column(idx[0])
	}
	return array.NewRecordBatch(schema, cols, rec.NumRows()), nil
}

func concat(mem memory.Allocator, schema *arrow.Schema, recs []arrow.RecordBatch) (arrow.RecordBatch, error) {
	if len(recs) == 1 {
		recs[0].Retain()
		return recs[0], nil
	}
	cols := make([]arrow.Array, schema.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
	}
	parts := make([]arrow.Array, len(recs))
	for c := range cols {
		for i, r := range recs {
			parts[i] = r.Column(c)
		}
		a, err := array.Concatenate(parts, mem)
		if err != nil {
			return nil, fmt.Errorf("resolving: concatenating column %s: %w", schema.Field(c).Name, err)
		}
		cols[c] = a
	}
	return array.NewRecordBatch(schema, cols, rows), nil
}

func systemCols(rec arrow.RecordBatch) (*array.Uint64, *array.Uint64, *array.Int8, error) {
	sc := rec.Schema()
	get := func(name string) arrow.Array {
		idx := sc.FieldIndices(name)
		if len(idx) != 1 {
			return nil
		}
		return rec.Column(idx[0])
	}
	lsn, ok1 := get(proto.ColLSN).(*array.Uint64)
	seq, ok2 := get(proto.ColSeq).(*array.Uint64)
	op, ok3 := get(proto.ColOp).(*array.Int8)
	if !ok1 || !ok2 || !ok3 {
		return nil, nil, nil, fmt.Errorf("resolving: %w: want %s uint64, %s uint64, %s int8", ErrSchema, proto.ColLSN, proto.ColSeq, proto.ColOp)
	}
	return lsn, seq, op, nil
}

func take(mem memory.Allocator, rec arrow.RecordBatch, keep []int32) (arrow.RecordBatch, error) {
	ib := array.NewInt32Builder(mem)
	defer ib.Release()
	ib.AppendValues(keep, nil)
	idx := ib.NewArray()
	defer idx.Release()
	ctx := compute.WithAllocator(context.Background(), mem)
	cols := make([]arrow.Array, rec.NumCols())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for c := range cols {
		a, err := compute.TakeArray(ctx, rec.Column(c), idx)
		if err != nil {
			return nil, fmt.Errorf("resolving: taking column %s: %w", rec.Schema().Field(c).Name, err)
		}
		cols[c] = a
	}
	return array.NewRecordBatch(rec.Schema(), cols, int64(len(keep))), nil
}

// appendKey appends an unambiguous encoding of row i of column a.
func appendKey(b []byte, a arrow.Array, i int) []byte {
	if a.IsNull(i) {
		return append(b, 0)
	}
	b = append(b, 1)
	switch c := a.(type) {
	case *array.Int64:
		return binary.LittleEndian.AppendUint64(b, uint64(c.Value(i)))
	case *array.Int32:
		return binary.LittleEndian.AppendUint32(b, uint32(c.Value(i)))
	case *array.Int16:
		return binary.LittleEndian.AppendUint16(b, uint16(c.Value(i)))
	case *array.Uint64:
		return binary.LittleEndian.AppendUint64(b, c.Value(i))
	case *array.Date32:
		return binary.LittleEndian.AppendUint32(b, uint32(c.Value(i)))
	case *array.Timestamp:
		return binary.LittleEndian.AppendUint64(b, uint64(c.Value(i)))
	case *array.Float64:
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(c.Value(i)))
	case *array.Float32:
		return binary.LittleEndian.AppendUint32(b, math.Float32bits(c.Value(i)))
	case *array.Boolean:
		if c.Value(i) {
			return append(b, 1)
		}
		return append(b, 0)
	case *array.String:
		s := c.Value(i)
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	case *array.Binary:
		v := c.Value(i)
		b = binary.AppendUvarint(b, uint64(len(v)))
		return append(b, v...)
	default:
		s := a.ValueStr(i)
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	}
}

// keepToastSources switches rule 6's preservation off (negative control).
var keepToastSources = true

// toastSources returns the rows (indices into all), other than the winners
// in best, of every key whose winning row marks some column as
// TOAST-unchanged: the value it stands for lives in one of them, and
// dropping them would leave the catalog nothing to fill it from.
func toastSources(all []Ref, cols []spanCols, key func(Ref) []byte, best map[string]int) []int {
	if !keepToastSources {
		return nil
	}
	need := map[string]int{}
	for k, i := range best {
		if r := all[i]; cols[r.Span].markers(int(r.Row)) > 0 {
			need[k] = i
		}
	}
	if len(need) == 0 {
		return nil
	}
	var extra []int
	for i, r := range all {
		if w, ok := need[string(key(r))]; ok && w != i {
			extra = append(extra, i)
		}
	}
	return extra
}
