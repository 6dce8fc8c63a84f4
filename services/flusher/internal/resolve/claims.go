package resolve

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// ErrClaim marks a value carried by reference that cannot be put back: its
// object is missing or does not convert. It is permanent.
var ErrClaim = errors.New("value carried by reference unreadable")

// GetClaimFunc reads the claim-check object at a proto.ClaimPath.
type GetClaimFunc func(ctx context.Context, path string) ([]byte, error)

// AppendFunc appends a value's Postgres text form to b as kind
// (pgtypes.AppendText, the reader's converter).
type AppendFunc func(b array.Builder, kind proto.Kind, text []byte) error

// HasClaims reports whether batches of schema carry values by reference.
func HasClaims(schema *arrow.Schema) bool { return len(schema.FieldIndices(proto.ColClaims)) > 0 }

// InlineClaims returns rec with every value its rows carry by reference
// (named in proto.ColClaims, NULL in the row, the Postgres text form at
// proto.ClaimPath in the pack store) put into its column, converted as the
// reader converts inline values, and without the ColClaims column: a pack
// never holds a reference. A rec without ColClaims is returned retained.
// The caller releases the result. Memory: the values read, and their column
// built once and copied once.
func InlineClaims(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, get GetClaimFunc, app AppendFunc) (arrow.RecordBatch, error) {
	sc := rec.Schema()
	ci := sc.FieldIndices(proto.ColClaims)
	if len(ci) == 0 {
		rec.Retain()
		return rec, nil
	}
	claims, ok := rec.Column(ci[0]).(*array.List)
	if !ok {
		return nil, fmt.Errorf("inlining claims: %w: %s is %s", ErrSchema, proto.ColClaims, rec.Column(ci[0]).DataType())
	}
	names, ok := claims.ListValues().(*array.String)
	if !ok {
		return nil, fmt.Errorf("inlining claims: %w: %s holds %s", ErrSchema, proto.ColClaims, claims.ListValues().DataType())
	}
	table, _ := sc.Metadata().GetValue(proto.MetaTable)
	lsn, seq, _, err := systemCols(rec)
	if err != nil {
		return nil, err
	}
	// values[column][row] for the claimed cells.
	values := map[int]map[int][]byte{}
	for i := 0; i < int(rec.NumRows()); i++ {
		if claims.IsNull(i) {
			continue
		}
		pos := proto.Position{LSN: proto.LSN(lsn.Value(i)), Seq: seq.Value(i)}
		start, end := claims.ValueOffsets(i)
		for j := start; j < end; j++ {
			name := names.Value(int(j))
			c := sc.FieldIndices(name)
			if len(c) != 1 || proto.IsSystemColumn(name) {
				return nil, fmt.Errorf("inlining claims: %w: row at %s claims column %q, not in the batch", ErrSchema, pos, name)
			}
			if !rec.Column(c[0]).IsNull(i) {
				return nil, fmt.Errorf("inlining claims: %w: row at %s claims column %q, which holds a value", ErrSchema, pos, name)
			}
			v, err := get(ctx, proto.ClaimPath(table, pos, name))
			if errors.Is(err, packstore.ErrNotFound) {
				err = fmt.Errorf("%w: %w", ErrClaim, err)
			}
			if err != nil {
				return nil, fmt.Errorf("inlining the value of %s.%s at %s: %w", table, name, pos, err)
			}
			if values[c[0]] == nil {
				values[c[0]] = map[int][]byte{}
			}
			values[c[0]][i] = v
		}
	}
	fields := slices.Delete(slices.Clone(sc.Fields()), ci[0], ci[0]+1)
	cols := make([]arrow.Array, 0, len(fields))
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	for c := range sc.Fields() {
		if c == ci[0] {
			continue
		}
		if values[c] == nil {
			a := rec.Column(c)
			a.Retain()
			cols = append(cols, a)
			continue
		}
		a, err := inlineColumn(mem, sc.Field(c), rec.Column(c), values[c], app)
		if err != nil {
			return nil, fmt.Errorf("inlining claims of %s.%s: %w", table, sc.Field(c).Name, err)
		}
		cols = append(cols, a)
	}
	md := sc.Metadata()
	out := array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
	return out, nil
}

// inlineColumn is col with the rows in vals replaced by their converted
// text forms.
func inlineColumn(mem memory.Allocator, f arrow.Field, col arrow.Array, vals map[int][]byte, app AppendFunc) (arrow.Array, error) {
	kind, err := proto.FieldKind(f)
	if err != nil {
		return nil, err
	}
	var parts []arrow.Array
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	n := col.Len()
	from := 0
	for i := 0; i < n; i++ {
		v, ok := vals[i]
		if !ok {
			continue
		}
		if from < i {
			parts = append(parts, array.NewSlice(col, int64(from), int64(i)))
		}
		b := array.NewBuilder(mem, f.Type)
		err := app(b, kind, v)
		if err == nil {
			parts = append(parts, b.NewArray())
		}
		b.Release()
		if err != nil {
			return nil, fmt.Errorf("%w: converting the value at row %d: %w", ErrClaim, i, err)
		}
		from = i + 1
	}
	if from < n {
		parts = append(parts, array.NewSlice(col, int64(from), int64(n)))
	}
	if len(parts) == 1 {
		parts[0].Retain()
		return parts[0], nil
	}
	return array.Concatenate(parts, mem)
}
