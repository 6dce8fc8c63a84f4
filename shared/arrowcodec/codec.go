package arrowcodec

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
)

// MaxBodySize is the largest body Decode accepts: the largest max_payload the
// configuration allows (64 MiB).
const MaxBodySize = 64 << 20

// Compression selects the IPC body compression Encode writes.
type Compression int

const (
	// None writes uncompressed buffers (the default: the cheapest to encode
	// and decode; NATS links are local or fast).
	None Compression = iota
	// Zstd compresses every buffer with zstd.
	Zstd
	// LZ4 compresses every buffer with lz4 frames.
	LZ4
)

// DefaultCompression is what Encode uses.
var DefaultCompression = None

// Encode writes rec as one Arrow IPC stream: its schema, one batch, the end
// marker. rec is not released.
func Encode(rec arrow.RecordBatch) ([]byte, error) {
	return EncodeWith(rec, DefaultCompression)
}

// EncodeWith is Encode with an explicit compression.
func EncodeWith(rec arrow.RecordBatch, c Compression) (b []byte, err error) {
	if rec == nil {
		return nil, errors.New("encoding arrow message: nil record")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("encoding arrow message: %v", r)
		}
	}()
	opts := []ipc.Option{ipc.WithSchema(rec.Schema())}
	switch c {
	case Zstd:
		opts = append(opts, ipc.WithZstd())
	case LZ4:
		opts = append(opts, ipc.WithLZ4())
	}
	// The stream is written into a pooled scratch buffer and copied out at
	// its exact size: a fresh bytes.Buffer grew by doubling (each step a
	// zeroed allocation and a copy) and a body kept in flight would hold
	// up to twice its size (the reader keeps max_in_flight bodies alive
	// until their acks).
	buf := scratchBufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxScratch {
			scratchBufs.Put(buf)
		}
	}()
	w := ipc.NewWriter(buf, opts...)
	if err := w.Write(rec); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("encoding arrow message: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encoding arrow message: %w", err)
	}
	return bytes.Clone(buf.Bytes()), nil
}

// scratchBufs are EncodeWith's scratch buffers; one larger than maxScratch
// is not kept.
var scratchBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxScratch = 16 << 20

// Decode reads a body written by Encode. The returned batch is allocated from
// mem (nil means memory.DefaultAllocator) and owned by the caller, who must
// Release it. Every error wraps ErrDecode.
func Decode(body []byte, mem memory.Allocator) (arrow.RecordBatch, error) {
	if len(body) > MaxBodySize {
		return nil, fmt.Errorf("%w: %w: %d bytes, limit %d", ErrDecode, ErrTooLarge, len(body), MaxBodySize)
	}
	if len(body) == 0 {
		return nil, fmt.Errorf("%w: empty body", ErrDecode)
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	if err := verifyStream(body); err != nil {
		return nil, fmt.Errorf("%w: malformed IPC stream: %v", ErrDecode, err)
	}
	da := newDecodeAllocator(mem, MaxDecodedSize)
	rec, err := decode(body, da)
	if err != nil {
		da.releaseLeaked()
		return nil, err
	}
	return rec, nil
}

func decode(body []byte, mem memory.Allocator) (rec arrow.RecordBatch, err error) {
	defer func() {
		if r := recover(); r != nil {
			if rec != nil {
				rec.Release()
				rec = nil
			}
			err = fmt.Errorf("%w: malformed IPC stream: %v", ErrDecode, r)
		}
	}()
	r, err := ipc.NewReader(bytes.NewReader(body), ipc.WithAllocator(mem), ipc.WithBodySizeLimit(MaxBodySize), ipc.WithMetadataSizeLimit(MaxMetadataSize))
	if err != nil {
		return nil, fmt.Errorf("%w: reading schema: %v", ErrDecode, err)
	}
	defer r.Release()
	if !r.Next() {
		if err := r.Err(); err != nil {
			return nil, fmt.Errorf("%w: reading batch: %v", ErrDecode, err)
		}
		return nil, fmt.Errorf("%w: stream holds no record batch", ErrDecode)
	}
	rec = r.RecordBatch()
	rec.Retain()
	if r.Next() {
		rec.Release()
		return nil, fmt.Errorf("%w: stream holds more than one record batch", ErrDecode)
	}
	if err := r.Err(); err != nil {
		rec.Release()
		return nil, fmt.Errorf("%w: reading end of stream: %v", ErrDecode, err)
	}
	if err := array.ValidateRecordFull(rec); err != nil {
		rec.Release()
		return nil, fmt.Errorf("%w: invalid batch: %v", ErrDecode, err)
	}
	return rec, nil
}

// Fingerprint identifies a schema: the first 16 hex characters of a sha256
// over every field's name, Arrow type, nullability and its sluice.kind and
// sluice.pgtype metadata, in field order. Equal schemas (for sluice's
// purposes) give equal fingerprints in every process and release.
func Fingerprint(s *arrow.Schema) string {
	h := sha256.New()
	var n [8]byte
	put := func(v string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(v)))
		h.Write(n[:])
		h.Write([]byte(v))
	}
	if s == nil {
		return hex.EncodeToString(h.Sum(nil))[:16]
	}
	for _, f := range s.Fields() {
		put(f.Name)
		put(f.Type.String())
		if f.Nullable {
			put("null")
		} else {
			put("notnull")
		}
		kind, _ := f.Metadata.GetValue(proto.MetaKind)
		put(kind)
		pg, _ := f.Metadata.GetValue(proto.MetaPgType)
		put(pg)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
