package arrowcodec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Arrow IPC files (packs) are read by arrow-go's file reader, which trusts
// the footer, the block table and every message's flatbuffer the way the
// stream reader does (see verifyStream), and which decompresses a buffer
// into as many bytes as its 8-byte length prefix claims, reading only that
// many: a damaged zstd frame then yields garbage that no checksum catches.
// VerifyFile checks all of it first, so that nothing arrow-go or an engine
// does with a file can be steered by a damaged one.

var fileMagic = []byte("ARROW1")

// Footer.fbs and Message.fbs vtable offsets and struct sizes.
const (
	footerSchema        = 6
	footerDictionaries  = 8
	footerRecordBatches = 10
	footerCustomMeta    = 12

	blockSize  = 24 // Block: offset int64, metaDataLength int32 (+4 padding), bodyLength int64
	nodeSize   = 16 // FieldNode: length int64, null_count int64
	bufferSize = 16 // Buffer: offset int64, length int64

	rbLength = 4

	compressCodec = 4
	codecLZ4Frame = 0
	codecZstd     = 1
)

// VerifyFile checks an Arrow IPC file before arrow-go reads it: the magic
// at both ends, the footer's flatbuffer (schema included), every record
// batch block inside the file and its message's flatbuffer, every buffer
// inside its body, and every compressed buffer: it must decompress, to the
// end of its frame (checksum included), to exactly its declared size.
// maxBatch bounds the decompressed bytes of one record batch. Files with
// dictionary batches are refused (sluice never writes them).
func VerifyFile(data []byte, maxBatch int64) error {
	footer, f, err := verifyFooter(data)
	if err != nil {
		return err
	}
	if _, n, err := f.vector(footerDictionaries, blockSize); err != nil || n > 0 {
		return errors.Join(fmt.Errorf("footer: %d dictionary batches (none expected)", n), err)
	}
	start, n, err := f.vector(footerRecordBatches, blockSize)
	if err != nil {
		return fmt.Errorf("footer record batches: %w", err)
	}
	end := int64(len(data) - len(footer) - 10) // where the footer starts
	dec := &decompressors{maxBatch: maxBatch}
	defer dec.close()
	for i := range n {
		p := start + i*blockSize
		off := int64(binary.LittleEndian.Uint64(footer[p:]))
		meta := int64(int32(binary.LittleEndian.Uint32(footer[p+8:])))
		body := int64(binary.LittleEndian.Uint64(footer[p+16:]))
		if off < 8 || meta < 8 || meta > MaxMetadataSize || body < 0 || off > end || meta > end-off || body > end-off-meta {
			return fmt.Errorf("record batch %d: block (offset %d, metadata %d, body %d) outside the file's %d bytes", i, off, meta, body, end)
		}
		if err := verifyBlock(data[off:off+meta], data[off+meta:off+meta+body], maxBatch, dec); err != nil {
			return fmt.Errorf("record batch %d: %w", i, err)
		}
	}
	return nil
}

// VerifyFileFooter checks only what reading a file's schema touches: the
// magic at both ends and the footer's flatbuffer.
func VerifyFileFooter(data []byte) error {
	_, f, err := verifyFooter(data)
	if err != nil {
		return err
	}
	if _, _, err := f.vector(footerDictionaries, blockSize); err != nil {
		return fmt.Errorf("footer dictionaries: %w", err)
	}
	if _, _, err := f.vector(footerRecordBatches, blockSize); err != nil {
		return fmt.Errorf("footer record batches: %w", err)
	}
	return nil
}

func fileFooter(data []byte) ([]byte, error) {
	if len(data) < 8+10 || !bytes.Equal(data[:len(fileMagic)], fileMagic) || !bytes.Equal(data[len(data)-len(fileMagic):], fileMagic) {
		return nil, errors.New("not an Arrow IPC file (magic)")
	}
	size := int64(int32(binary.LittleEndian.Uint32(data[len(data)-10:])))
	if size <= 0 || size > MaxMetadataSize || size > int64(len(data)-8-10) {
		return nil, fmt.Errorf("footer length %d out of bounds", size)
	}
	return data[int64(len(data))-10-size : len(data)-10], nil
}

// verifyBlock checks one record batch message (its length prefix and
// flatbuffer) and its body.
func verifyBlock(meta, body []byte, maxBatch int64, dec *decompressors) error {
	prefix := 4
	if binary.LittleEndian.Uint32(meta) == 0xFFFFFFFF {
		prefix = 8
	}
	n := int64(int32(binary.LittleEndian.Uint32(meta[prefix-4:])))
	if n <= 0 || n > int64(len(meta)-prefix) {
		return fmt.Errorf("message length %d outside its %d-byte block", n, len(meta))
	}
	fb := meta[prefix : prefix+int(n)]
	bodyLen, err := verifyMessage(fb)
	if err != nil {
		return err
	}
	if bodyLen < 0 || bodyLen > int64(len(body)) {
		return fmt.Errorf("message body length %d outside its %d-byte block", bodyLen, len(body))
	}
	body = body[:bodyLen]
	root, _ := u32(fb, 0)
	m, _ := tableAt(fb, root)
	if ht, _ := m.u8(msgHeaderType); ht != hdrRecordBatch {
		return fmt.Errorf("message header type %d in a record batch block", ht)
	}
	rb, _, _ := m.sub(msgHeader)
	if rows, err := rb.i64(rbLength); err != nil || rows < 0 {
		return errors.Join(fmt.Errorf("record batch length %d", rows), err)
	}
	start, nodes, _ := rb.vector(rbNodes, nodeSize)
	for i := range nodes {
		p := start + i*nodeSize
		length := int64(binary.LittleEndian.Uint64(fb[p:]))
		nulls := int64(binary.LittleEndian.Uint64(fb[p+8:]))
		if length < 0 || nulls < 0 || nulls > length {
			return fmt.Errorf("field node %d: length %d, null count %d", i, length, nulls)
		}
	}
	codec := -1
	if c, ok, err := rb.sub(rbCompress); err != nil {
		return err
	} else if ok {
		v, err := c.u8(compressCodec)
		if err != nil {
			return err
		}
		codec = int(v)
		if codec != codecLZ4Frame && codec != codecZstd {
			return fmt.Errorf("unknown compression codec %d", codec)
		}
	}
	start, bufs, _ := rb.vector(rbBuffers, bufferSize)
	var total int64
	for i := range bufs {
		p := start + i*bufferSize
		off := int64(binary.LittleEndian.Uint64(fb[p:]))
		length := int64(binary.LittleEndian.Uint64(fb[p+8:]))
		if length == 0 {
			continue
		}
		if off < 0 || length < 0 || off > int64(len(body)) || length > int64(len(body))-off {
			return fmt.Errorf("buffer %d (offset %d, length %d) outside the %d-byte body", i, off, length, len(body))
		}
		if codec < 0 {
			continue
		}
		b := body[off : off+length]
		if len(b) < 8 {
			return fmt.Errorf("compressed buffer %d shorter than its length prefix", i)
		}
		size := int64(binary.LittleEndian.Uint64(b))
		if size == -1 {
			continue // stored uncompressed
		}
		if size < 0 || size > maxBatch-total {
			return fmt.Errorf("compressed buffer %d claims %d bytes (the batch may decompress to at most %d)", i, size, maxBatch)
		}
		total += size
		got, err := dec.count(codec, b[8:], size)
		if err != nil {
			return fmt.Errorf("compressed buffer %d: %w", i, err)
		}
		if got != size {
			return fmt.Errorf("compressed buffer %d: decompresses to %d bytes, declares %d", i, got, size)
		}
	}
	return nil
}

// decompressors reuses one decoder per codec across a file's buffers.
type decompressors struct {
	maxBatch int64 // bounds a zstd frame's window too
	zstd     *zstd.Decoder
	lz4      *lz4.Reader
}

// count decompresses src to its end (verifying the frame's checksum) and
// returns how many bytes it holds, reading at most limit+1 of them.
func (d *decompressors) count(codec int, src []byte, limit int64) (int64, error) {
	var r io.Reader
	switch codec {
	case codecZstd:
		if d.zstd == nil {
			bound := uint64(min(max(d.maxBatch, zstd.MinWindowSize), zstd.MaxWindowSize))
			dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(bound), zstd.WithDecoderMaxMemory(bound))
			if err != nil {
				return 0, err
			}
			d.zstd = dec
		}
		if err := d.zstd.Reset(bytes.NewReader(src)); err != nil {
			return 0, err
		}
		r = d.zstd
	default:
		if d.lz4 == nil {
			d.lz4 = lz4.NewReader(nil)
		}
		d.lz4.Reset(bytes.NewReader(src))
		r = d.lz4
	}
	return io.Copy(io.Discard, io.LimitReader(r, limit+1))
}

func (d *decompressors) close() {
	if d.zstd != nil {
		d.zstd.Close()
	}
}

// LimitedAllocator is a memory.Allocator that refuses (by panicking with
// an error the IPC readers recover) any allocation that would take what it
// has handed out and not yet freed past its limit. A decode through it
// cannot exhaust memory whatever a damaged file claims.
type LimitedAllocator struct{ a *decodeAllocator }

// NewLimitedAllocator wraps mem (nil: memory.DefaultAllocator).
func NewLimitedAllocator(mem memory.Allocator, limit int64) *LimitedAllocator {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	return &LimitedAllocator{newDecodeAllocator(mem, int(min(limit, int64(^uint(0)>>1))))}
}

// Allocate implements memory.Allocator.
func (l *LimitedAllocator) Allocate(size int) []byte { return l.a.Allocate(size) }

// Reallocate implements memory.Allocator.
func (l *LimitedAllocator) Reallocate(size int, b []byte) []byte { return l.a.Reallocate(size, b) }

// Free implements memory.Allocator.
func (l *LimitedAllocator) Free(b []byte) { l.a.Free(b) }

// ReleaseLeaked frees every allocation still live: call it only after a
// failed decode, when nothing it allocated is referenced any more.
func (l *LimitedAllocator) ReleaseLeaked() { l.a.releaseLeaked() }

// verifyFooter checks the magic at both ends and the footer's flatbuffer up
// to its schema and metadata, and returns the footer and its root table.
func verifyFooter(data []byte) ([]byte, fbTable, error) {
	footer, err := fileFooter(data)
	if err != nil {
		return nil, fbTable{}, err
	}
	root, err := u32(footer, 0)
	if err != nil {
		return nil, fbTable{}, fmt.Errorf("footer: %w", err)
	}
	f, err := tableAt(footer, root)
	if err != nil {
		return nil, fbTable{}, fmt.Errorf("footer: %w", err)
	}
	s, ok, err := f.sub(footerSchema)
	if err != nil || !ok {
		return nil, fbTable{}, errors.Join(errors.New("footer without a schema"), err)
	}
	if err := verifySchema(s); err != nil {
		return nil, fbTable{}, fmt.Errorf("footer schema: %w", err)
	}
	if err := f.tables(footerCustomMeta, verifyKV); err != nil {
		return nil, fbTable{}, fmt.Errorf("footer metadata: %w", err)
	}
	return footer, f, nil
}
