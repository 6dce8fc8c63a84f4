package export

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/pgtypes"
)

// Schema is the Arrow schema of an exported table: each column in the
// Arrow type its kind travels as, nullable, with its kind in the field's
// sluice.kind metadata.
func Schema(cols []Column) (*arrow.Schema, error) {
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		t, err := c.Kind.ArrowType()
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		fields[i] = arrow.Field{Name: c.Name, Type: t, Nullable: true,
			Metadata: arrow.NewMetadata([]string{proto.MetaKind}, []string{string(c.Kind)})}
	}
	return arrow.NewSchema(fields, nil), nil
}

// recordWriter is what the two Arrow file writers share.
type recordWriter interface {
	Write(arrow.RecordBatch) error
	Close() error
}

// arrowSink turns each page into one record batch (a Parquet row group, an
// Arrow IPC record batch).
type arrowSink struct {
	cols  []Column
	index map[string]int
	b     *array.RecordBuilder
	out   recordWriter
}

// noClose hides an io.Closer: the Parquet writer closes a sink that is
// one, and the caller owns w.
type noClose struct{ io.Writer }

func newArrowSink(w io.Writer, f Format, cols []Column) (*arrowSink, error) {
	schema, err := Schema(cols)
	if err != nil {
		return nil, err
	}
	mem := memory.DefaultAllocator
	s := &arrowSink{cols: cols, index: make(map[string]int, len(cols)), b: array.NewRecordBuilder(mem, schema)}
	for i, c := range cols {
		s.index[c.Name] = i
	}
	switch f {
	case Parquet:
		props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd), parquet.WithAllocator(mem))
		fw, err := pqarrow.NewFileWriter(schema, noClose{w}, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema(), pqarrow.WithAllocator(mem)))
		if err != nil {
			s.b.Release()
			return nil, fmt.Errorf("starting the parquet file: %w", err)
		}
		s.out = fw
	default:
		fw, err := ipc.NewFileWriter(w, ipc.WithSchema(schema), ipc.WithAllocator(mem), ipc.WithZstd())
		if err != nil {
			s.b.Release()
			return nil, fmt.Errorf("starting the arrow file: %w", err)
		}
		s.out = fw
	}
	return s, nil
}

func (s *arrowSink) page(rows []json.RawMessage) error {
	if len(rows) == 0 {
		return nil
	}
	seen := make([]bool, len(s.cols))
	for _, r := range rows {
		clear(seen)
		err := eachField(r, func(k string, v json.RawMessage) error {
			i, ok := s.index[k]
			if !ok {
				return fmt.Errorf("column %s is not in the table's schema", k)
			}
			seen[i] = true
			if err := appendValue(s.b.Field(i), s.cols[i].Kind, v); err != nil {
				return fmt.Errorf("column %s: %w", k, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for i, ok := range seen {
			if !ok {
				s.b.Field(i).AppendNull()
			}
		}
	}
	rec := s.b.NewRecordBatch()
	defer rec.Release()
	return s.out.Write(rec)
}

func (s *arrowSink) close() error {
	s.b.Release()
	return s.out.Close()
}

func (s *arrowSink) abort() {
	s.b.Release()
	_ = s.out.Close()
}

// appendValue appends one JSON value of a row, as the read path renders
// kind (to_jsonb), to b: its text form parsed by the same code that builds
// the reader's batches, so an exported value is the value that travelled.
func appendValue(b array.Builder, kind proto.Kind, v json.RawMessage) error {
	if string(v) == "null" {
		b.AppendNull()
		return nil
	}
	if elem, ok := kind.Elem(); ok {
		lb, ok := b.(*array.ListBuilder)
		if !ok {
			return fmt.Errorf("%s value into %T", kind, b)
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(v, &elems); err != nil {
			return fmt.Errorf("decoding a %s value: %w", kind, err)
		}
		lb.Append(true)
		for _, e := range elems {
			if err := appendValue(lb.ValueBuilder(), elem, e); err != nil {
				return err
			}
		}
		return nil
	}
	text := []byte(v)
	switch kind {
	case proto.KindJSON, proto.KindJSONB, proto.KindToJSONB:
		// The document itself, as the read path writes it.
	default:
		if len(v) > 0 && v[0] == '"' {
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("decoding a %s value: %w", kind, err)
			}
			text = []byte(s)
		}
	}
	return pgtypes.AppendText(b, kind, text)
}
