package route

import (
	"bytes"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/shared/arrowcodec"
)

// eos is the IPC stream's end marker (what ipc.Writer.Close writes).
var eos = [8]byte{0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0}

// bodyEncoder writes the bodies of the parts of one input batch. The bytes
// are exactly arrowcodec.Encode's (the schema message, the batch message,
// the end marker, as ipc.Writer writes them), made cheaper for thousands of
// small parts sharing one schema: the schema message is built once per
// batch instead of once per part, and each body is assembled in a scratch
// buffer reused across the parts one worker encodes, then copied out at its
// exact size, instead of growing a fresh bytes.Buffer from empty. Not safe
// for concurrent use: one per worker, each with its own scratch (clone).
//
// A schema with dictionaries, or a compression other than none, takes
// arrowcodec.Encode itself.
type bodyEncoder struct {
	schema  *arrow.Schema
	header  []byte // the schema message; nil: use arrowcodec.Encode
	scratch bytes.Buffer
}

func newBodyEncoder(schema *arrow.Schema) *bodyEncoder {
	e := &bodyEncoder{schema: schema}
	if arrowcodec.DefaultCompression != arrowcodec.None || hasDictionary(schema) {
		return e
	}
	p := ipc.GetSchemaPayload(schema, memory.DefaultAllocator)
	defer p.Release()
	var b bytes.Buffer
	if _, err := p.WritePayload(&b); err != nil {
		return e // arrowcodec.Encode will report it
	}
	e.header = b.Bytes()
	return e
}

// clone returns an encoder sharing e's schema message, with its own scratch.
func (e *bodyEncoder) clone() *bodyEncoder {
	return &bodyEncoder{schema: e.schema, header: e.header}
}

func hasDictionary(s *arrow.Schema) bool {
	var walk func(dt arrow.DataType) bool
	walk = func(dt arrow.DataType) bool {
		if dt.ID() == arrow.DICTIONARY {
			return true
		}
		if n, ok := dt.(arrow.NestedType); ok {
			for _, f := range n.Fields() {
				if walk(f.Type) {
					return true
				}
			}
		}
		return false
	}
	for _, f := range s.Fields() {
		if walk(f.Type) {
			return true
		}
	}
	return false
}

// encode returns rec as one IPC stream body.
func (e *bodyEncoder) encode(rec arrow.RecordBatch) (body []byte, err error) {
	if e.header == nil || rec.Schema() != e.schema && !rec.Schema().Equal(e.schema) {
		return arrowcodec.Encode(rec)
	}
	defer func() { // as arrowcodec.Encode: a malformed batch must not crash the router
		if r := recover(); r != nil {
			err = fmt.Errorf("encoding arrow message: %v", r)
		}
	}()
	p, err := ipc.GetRecordBatchPayload(rec)
	if err != nil {
		return nil, fmt.Errorf("encoding arrow message: %w", err)
	}
	defer p.Release()
	e.scratch.Reset()
	e.scratch.Write(e.header)
	if _, err := p.WritePayload(&e.scratch); err != nil {
		return nil, fmt.Errorf("encoding arrow message: %w", err)
	}
	e.scratch.Write(eos[:])
	return bytes.Clone(e.scratch.Bytes()), nil
}
