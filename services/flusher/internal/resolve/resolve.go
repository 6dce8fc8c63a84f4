package resolve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

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
// releases the result; recs are not released.
func Resolve(mem memory.Allocator, recs []arrow.RecordBatch) (arrow.RecordBatch, Stats, error) {
	var st Stats
	if len(recs) == 0 {
		return nil, st, fmt.Errorf("resolving: %w: no batches", ErrSchema)
	}
	schema := recs[0].Schema()
	all, err := concat(mem, schema, recs)
	if err != nil {
		return nil, st, err
	}
	defer all.Release()
	n := int(all.NumRows())
	st.In = int64(n)
	lsn, seq, op, err := systemCols(all)
	if err != nil {
		return nil, st, err
	}
	var keyCols []arrow.Array
	if pk, ok := schema.Metadata().GetValue(proto.MetaPrimaryKey); ok && pk != "" {
		for _, name := range strings.Split(pk, ",") {
			idx := schema.FieldIndices(strings.TrimSpace(name))
			if len(idx) != 1 {
				return nil, st, fmt.Errorf("resolving: %w: primary key column %q not in the batch", ErrSchema, name)
			}
			keyCols = append(keyCols, all.Column(idx[0]))
		}
	}
	pos := func(i int) proto.Position { return proto.Position{LSN: proto.LSN(lsn.Value(i)), Seq: seq.Value(i)} }
	var keep []int
	if len(keyCols) == 0 {
		keep = make([]int, n)
		for i := range keep {
			keep[i] = i
		}
	} else {
		best := make(map[string]int, n)
		markers := unchangedCounter(all)
		var kb []byte
		for i := 0; i < n; i++ {
			kb = kb[:0]
			for _, c := range keyCols {
				kb = appendKey(kb, c, i)
			}
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
			if c := pos(j).Compare(pos(i)); c < 0 || (c == 0 && markers(i) <= markers(j)) {
				best[string(kb)] = i
			}
		}
		keep = make([]int, 0, len(best))
		for _, i := range best {
			keep = append(keep, i)
		}
		keep = append(keep, toastSources(all, keyCols, best, n)...)
	}
	slices.SortFunc(keep, func(a, b int) int {
		if c := pos(a).Compare(pos(b)); c != 0 {
			return c
		}
		return a - b
	})
	for _, i := range keep {
		if proto.IsTombstone(op.Value(i)) {
			st.Tombstones++
		}
	}
	st.Out = int64(len(keep))
	sorted := true
	for k, i := range keep {
		if k != i {
			sorted = false
			break
		}
	}
	if sorted && len(keep) == n {
		all.Retain()
		return all, st, nil
	}
	out, err := take(mem, all, keep)
	if err != nil {
		return nil, st, err
	}
	return out, st, nil
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
		if sc := r.Schema(); sc != schema && !sc.Equal(schema) { // identity first: slices of one message share it
			return nil, fmt.Errorf("resolving: %w: batches with different schemas", ErrSchema)
		}
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

func take(mem memory.Allocator, rec arrow.RecordBatch, keep []int) (arrow.RecordBatch, error) {
	ib := array.NewInt32Builder(mem)
	defer ib.Release()
	ib.Reserve(len(keep))
	for _, i := range keep {
		ib.UnsafeAppend(int32(i))
	}
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

// toastSources returns the rows, other than the winners in best, of every key
// whose winning row marks some column as TOAST-unchanged: the value it stands
// for lives in one of them, and dropping them would leave the catalog nothing
// to fill it from.
func toastSources(all arrow.RecordBatch, keyCols []arrow.Array, best map[string]int, n int) []int {
	idx := all.Schema().FieldIndices(proto.ColUnchanged)
	if !keepToastSources || len(idx) != 1 {
		return nil
	}
	unch, ok := all.Column(idx[0]).(*array.List)
	if !ok {
		return nil
	}
	marked := func(i int) bool {
		if unch.IsNull(i) {
			return false
		}
		start, end := unch.ValueOffsets(i)
		return end > start
	}
	need := map[string]int{}
	for k, i := range best {
		if marked(i) {
			need[k] = i
		}
	}
	if len(need) == 0 {
		return nil
	}
	var extra []int
	var kb []byte
	for i := 0; i < n; i++ {
		kb = kb[:0]
		for _, c := range keyCols {
			kb = appendKey(kb, c, i)
		}
		if w, ok := need[string(kb)]; ok && w != i {
			extra = append(extra, i)
		}
	}
	return extra
}

// unchangedCounter returns how many TOAST-unchanged markers row i carries.
func unchangedCounter(all arrow.RecordBatch) func(i int) int {
	idx := all.Schema().FieldIndices(proto.ColUnchanged)
	if len(idx) != 1 {
		return func(int) int { return 0 }
	}
	unch, ok := all.Column(idx[0]).(*array.List)
	if !ok {
		return func(int) int { return 0 }
	}
	return func(i int) int {
		if unch.IsNull(i) {
			return 0
		}
		start, end := unch.ValueOffsets(i)
		return int(end - start)
	}
}
