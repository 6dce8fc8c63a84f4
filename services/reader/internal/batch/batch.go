package batch

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
)

// ErrValue marks a source value the kind's converter refused. The builder
// is left inconsistent: the caller must Discard it.
var ErrValue = errors.New("converting source value")

// Value kinds of a row image (the pgoutput tuple kinds).
const (
	Null      byte = 'n'
	Text      byte = 't'
	Unchanged byte = 'u'
)

// Column is one source column.
type Column struct {
	Name    string
	Kind    proto.Kind
	PgType  string
	TypeOID uint32
	TypMod  int32
	// ToJSON, set for a proto.KindToJSONB column, converts a value's text
	// form to the JSON that to_jsonb gives before it is appended.
	ToJSON JSONFunc
}

// JSONFunc appends to dst the JSON for a value's Postgres text form
// (pgtypes.Shape.AppendJSON).
type JSONFunc func(dst, text []byte) ([]byte, error)

// Schema is the Arrow schema of one table's batches.
type Schema struct {
	Table       string
	Columns     []Column
	Key         []string
	Routing     string
	Arrow       *arrow.Schema
	Fingerprint string
	KeyIdx      []int // indexes of Key in Columns
	RoutingIdx  int
	Claims      bool // the Arrow schema ends with proto.ColClaims (WithClaims)
}

// System column types.
var (
	commitTimeType = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	unchangedType  = arrow.ListOf(arrow.BinaryTypes.String)
)

// NewSchema builds the schema of table from its columns, replica identity
// key and routing column.
func NewSchema(table string, cols []Column, key []string, routing string) (*Schema, error) {
	s := &Schema{Table: table, Columns: cols, Key: key, Routing: routing, RoutingIdx: -1}
	fields := make([]arrow.Field, 0, len(cols)+5)
	for i, c := range cols {
		dt, err := c.Kind.ArrowType()
		if err != nil {
			return nil, fmt.Errorf("building schema of %s: column %s: %w", table, c.Name, err)
		}
		fields = append(fields, arrow.Field{Name: c.Name, Type: dt, Nullable: true,
			Metadata: arrow.NewMetadata([]string{proto.MetaKind, proto.MetaPgType}, []string{string(c.Kind), c.PgType})})
		if c.Name == routing {
			s.RoutingIdx = i
		}
	}
	for _, k := range key {
		idx := -1
		for i, c := range cols {
			if c.Name == k {
				idx = i
			}
		}
		if idx < 0 {
			return nil, fmt.Errorf("building schema of %s: key column %s is not among its columns", table, k)
		}
		s.KeyIdx = append(s.KeyIdx, idx)
	}
	if s.RoutingIdx < 0 {
		return nil, fmt.Errorf("building schema of %s: routing column %s is not among its columns", table, routing)
	}
	fields = append(fields,
		arrow.Field{Name: proto.ColOp, Type: arrow.PrimitiveTypes.Int8},
		arrow.Field{Name: proto.ColLSN, Type: arrow.PrimitiveTypes.Uint64},
		arrow.Field{Name: proto.ColSeq, Type: arrow.PrimitiveTypes.Uint64},
		arrow.Field{Name: proto.ColCommitTime, Type: commitTimeType},
		arrow.Field{Name: proto.ColUnchanged, Type: unchangedType, Nullable: true},
	)
	md := proto.SchemaMetadata(table, key, routing)
	s.Arrow = arrow.NewSchema(fields, &md)
	s.Fingerprint = arrowcodec.Fingerprint(s.Arrow)
	return s, nil
}

// WithClaims returns s with proto.ColClaims as a last field: the schema of
// a batch that carries values by reference.
func (s *Schema) WithClaims() *Schema {
	c := *s
	fields := append(slices.Clone(s.Arrow.Fields()), arrow.Field{Name: proto.ColClaims, Type: unchangedType, Nullable: true})
	md := s.Arrow.Metadata()
	c.Arrow = arrow.NewSchema(fields, &md)
	c.Fingerprint = arrowcodec.Fingerprint(c.Arrow)
	c.Claims = true
	return &c
}

// AppendFunc appends a value's Postgres text form to b as kind.
type AppendFunc func(b array.Builder, kind proto.Kind, text []byte) error

// Row is one output row. Kinds[i] is Null, Text or Unchanged; Values[i]
// holds the text form for Text.
type Row struct {
	Op         int8
	Pos        proto.Position
	CommitTime time.Time
	Kinds      []byte
	Values     [][]byte
	Unchanged  []string
	// Claims are the columns whose value is carried by reference (NULL in
	// Values); only a builder of a WithClaims schema takes them.
	Claims []string
}

// SetText sets r's values to vals, each a column's text form, a nil one
// NULL: a row read by a SELECT (the backfill's and a resync's copies),
// reusing r's slices.
func (r *Row) SetText(vals [][]byte) {
	r.Kinds, r.Values = r.Kinds[:0], r.Values[:0]
	for _, v := range vals {
		if v == nil {
			r.Kinds = append(r.Kinds, Null)
		} else {
			r.Kinds = append(r.Kinds, Text)
		}
		r.Values = append(r.Values, v)
	}
}

// Builder accumulates the rows of one table under one schema.
type Builder struct {
	Schema *Schema
	app    AppendFunc
	json   []byte // scratch for ToJSON
	rb     *array.RecordBuilder
	rows   int
	bytes  int
	first  proto.Position
	last   proto.Position
}

// NewBuilder returns an empty builder.
func NewBuilder(mem memory.Allocator, s *Schema, app AppendFunc) *Builder {
	return &Builder{Schema: s, app: app, rb: array.NewRecordBuilder(mem, s.Arrow)}
}

// Rows is the number of rows appended since the last cut.
func (b *Builder) Rows() int { return b.rows }

// Bytes estimates the encoded size of the rows since the last cut.
func (b *Builder) Bytes() int { return b.bytes }

// First and Last are the positions of the first and last rows since the
// last cut.
func (b *Builder) First() proto.Position { return b.first }

// Last is the position of the last row appended.
func (b *Builder) Last() proto.Position { return b.last }

// Append adds one row.
func (b *Builder) Append(r *Row) error {
	n := len(b.Schema.Columns)
	if len(r.Kinds) != n {
		return fmt.Errorf("%w: row of %s has %d columns, schema %d", ErrValue, b.Schema.Table, len(r.Kinds), n)
	}
	if len(r.Claims) > 0 && !b.Schema.Claims {
		return fmt.Errorf("%w: row of %s carries values by reference in a schema without %s", ErrValue, b.Schema.Table, proto.ColClaims)
	}
	size := 32
	for i := 0; i < n; i++ {
		fb := b.rb.Field(i)
		switch r.Kinds[i] {
		case Text:
			c := &b.Schema.Columns[i]
			v := r.Values[i]
			if c.ToJSON != nil {
				var err error
				if b.json, err = c.ToJSON(b.json[:0], v); err != nil {
					return fmt.Errorf("%w: %s.%s (%s): %w", ErrValue, b.Schema.Table, c.Name, c.PgType, err)
				}
				v = b.json
				if cap(b.json) > 1<<20 {
					b.json = nil // keep no large value's buffer between rows
				}
			}
			if err := b.app(fb, c.Kind, v); err != nil {
				return fmt.Errorf("%w: %s.%s (%s): %w", ErrValue, b.Schema.Table, c.Name, c.PgType, err)
			}
			size += len(v) + 8
		default:
			fb.AppendNull()
			size += 2
		}
	}
	b.rb.Field(n).(*array.Int8Builder).Append(r.Op)
	b.rb.Field(n + 1).(*array.Uint64Builder).Append(uint64(r.Pos.LSN))
	b.rb.Field(n + 2).(*array.Uint64Builder).Append(r.Pos.Seq)
	b.rb.Field(n + 3).(*array.TimestampBuilder).Append(arrow.Timestamp(r.CommitTime.UnixMicro()))
	lb := b.rb.Field(n + 4).(*array.ListBuilder)
	if len(r.Unchanged) == 0 {
		lb.AppendNull()
	} else {
		lb.Append(true)
		vb := lb.ValueBuilder().(*array.StringBuilder)
		for _, c := range r.Unchanged {
			vb.Append(c)
			size += len(c) + 4
		}
	}
	if b.Schema.Claims {
		cb := b.rb.Field(n + 5).(*array.ListBuilder)
		if len(r.Claims) == 0 {
			cb.AppendNull()
		} else {
			cb.Append(true)
			vb := cb.ValueBuilder().(*array.StringBuilder)
			for _, c := range r.Claims {
				vb.Append(c)
				size += len(c) + 4
			}
		}
	}
	if b.rows == 0 {
		b.first = r.Pos
	}
	b.last = r.Pos
	b.rows++
	b.bytes += size
	return nil
}

// Cut returns the rows appended since the last cut as one record batch and
// resets the builder. The caller releases the batch.
func (b *Builder) Cut() arrow.RecordBatch {
	rec := b.rb.NewRecordBatch()
	// The next batch is likely as long: reserve its offsets and values up
	// front instead of regrowing them.
	b.rb.Reserve(b.rows)
	b.rows, b.bytes = 0, 0
	b.first, b.last = proto.Position{}, proto.Position{}
	return rec
}

// Release frees the builder's memory.
func (b *Builder) Release() {
	if b.rb != nil {
		b.rb.Release()
		b.rb = nil
	}
}
