package split

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The take is written as a scatter: out[inv[k]] = in[k], where inv is the
// inverse of the counting sort's permutation (a bijection on [0, n)). It is
// the same take as out[j] = in[perm[j]], but it reads the input
// sequentially and writes into one sequential stream per destination, which
// keeps the caches warm where a gather would miss on nearly every read
// (measured 1.7x faster on fixed width, more on utf8).

// streams describes the permutation's output runs: ids[k] is the run
// (destination bucket; the dropped rows are the last run) of moved row k,
// and starts[b] the first new row of run b, ascending. Rows of one run keep
// their order, so a kernel can hand out output space with one cursor per
// run (offsets of variable-width values, child elements of lists) in the
// same pass that moves the rows, with no second pass over the output.
type streams struct {
	ids    []int32
	starts []int32
}

// take returns arr permuted by inv, allocated from mem.
func take(mem memory.Allocator, arr arrow.Array, inv []int32, st streams) (arrow.Array, error) {
	data, err := takeData(mem, arr.Data(), 0, inv, st)
	if err != nil {
		return nil, err
	}
	defer data.Release()
	return array.MakeFromData(data), nil
}

// int32s pools the list kernel's per-element scratch (*[]int32).
var int32s sync.Pool

// pooledScratch reuses the list kernel's scratch across batches; off: the
// benchmark's baseline (a fresh slice per list column per batch).
var pooledScratch = true

// getInt32s returns a scratch slice of n int32s, not zeroed.
func getInt32s(n int) *[]int32 {
	if !pooledScratch {
		b := make([]int32, n)
		return &b
	}
	if p, ok := int32s.Get().(*[]int32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	b := make([]int32, n)
	return &b
}

func putInt32s(p *[]int32) {
	if pooledScratch {
		int32s.Put(p)
	}
}

func newBuf(mem memory.Allocator, size int) *memory.Buffer {
	b := memory.NewResizableBuffer(mem)
	b.Resize(size)
	return b
}

func releaseBufs(bufs []*memory.Buffer) {
	for _, b := range bufs {
		if b != nil {
			b.Release()
		}
	}
}

// typed views a buffer's bytes as []T. Every arrow allocator aligns
// buffers to 64 bytes, and T is a plain fixed-size type.
func typed[T any](b []byte) []T {
	var z T
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}

// takeData permutes the logical rows [lo, lo+len(inv)) of d: row lo+k goes
// to inv[k].
func takeData(mem memory.Allocator, d arrow.ArrayData, lo int, inv []int32, st streams) (arrow.ArrayData, error) {
	n := len(inv)
	if n == 0 {
		// An empty selection: typically the child of a list column whose
		// selected rows are all NULL or {}. Its buffers may be absent, so
		// build a well-formed empty array instead of scattering.
		b := array.NewBuilder(mem, d.DataType())
		defer b.Release()
		a := b.NewArray()
		defer a.Release()
		data := a.Data()
		data.Retain()
		return data, nil
	}
	off := d.Offset() + lo
	bufs := d.Buffers()
	validity, nulls := takeValidity(mem, d, off, inv)

	switch dt := d.DataType().(type) {
	case *arrow.NullType:
		releaseBufs([]*memory.Buffer{validity})
		return array.NewData(dt, n, []*memory.Buffer{nil}, nil, n, 0), nil
	case *arrow.BooleanType:
		out := newBuf(mem, (n+7)/8)
		scatterBits(out.Bytes(), bufs[1].Bytes(), off, inv)
		return newData(dt, n, []*memory.Buffer{validity, out}, nil, nulls), nil
	case *arrow.StringType, *arrow.BinaryType:
		offs, vals := scatterVar(mem, typed[int32](bufs[1].Bytes())[off:off+n+1], bufs[2], inv, st)
		return newData(dt, n, []*memory.Buffer{validity, offs, vals}, nil, nulls), nil
	case *arrow.LargeStringType, *arrow.LargeBinaryType:
		offs, vals := scatterVar(mem, typed[int64](bufs[1].Bytes())[off:off+n+1], bufs[2], inv, st)
		return newData(dt, n, []*memory.Buffer{validity, offs, vals}, nil, nulls), nil
	case *arrow.ListType:
		offs, child, err := scatterList(mem, typed[int32](bufs[1].Bytes())[off:off+n+1], d.Children()[0], inv, st)
		if err != nil {
			releaseBufs([]*memory.Buffer{validity})
			return nil, err
		}
		defer child.Release()
		return newData(dt, n, []*memory.Buffer{validity, offs}, []arrow.ArrayData{child}, nulls), nil
	case *arrow.LargeListType:
		offs, child, err := scatterList(mem, typed[int64](bufs[1].Bytes())[off:off+n+1], d.Children()[0], inv, st)
		if err != nil {
			releaseBufs([]*memory.Buffer{validity})
			return nil, err
		}
		defer child.Release()
		return newData(dt, n, []*memory.Buffer{validity, offs}, []arrow.ArrayData{child}, nulls), nil
	case arrow.FixedWidthDataType:
		if _, dict := dt.(*arrow.DictionaryType); dict {
			break
		}
		bits := dt.BitWidth()
		if bits%8 != 0 || bits == 0 {
			break
		}
		w := bits / 8
		out := newBuf(mem, n*w)
		src := bufs[1].Bytes()
		switch w {
		case 1:
			scatterFixed(typed[uint8](out.Bytes()), typed[uint8](src)[off:off+n], inv)
		case 2:
			scatterFixed(typed[uint16](out.Bytes()), typed[uint16](src)[off:off+n], inv)
		case 4:
			scatterFixed(typed[uint32](out.Bytes()), typed[uint32](src)[off:off+n], inv)
		case 8:
			scatterFixed(typed[uint64](out.Bytes()), typed[uint64](src)[off:off+n], inv)
		default:
			dst := out.Bytes()
			for k, q := range inv {
				s := (off + k) * w
				copy(dst[int(q)*w:(int(q)+1)*w], src[s:s+w])
			}
		}
		return newData(dt, n, []*memory.Buffer{validity, out}, nil, nulls), nil
	}
	releaseBufs([]*memory.Buffer{validity})
	perm := make([]int32, n)
	for k, q := range inv {
		perm[q] = int32(lo + k)
	}
	return takeCompute(mem, d, perm)
}

func newData(dt arrow.DataType, n int, bufs []*memory.Buffer, children []arrow.ArrayData, nulls int) arrow.ArrayData {
	d := array.NewData(dt, n, bufs, children, nulls, 0)
	releaseBufs(bufs) // NewData retained them
	return d
}

// takeCompute is the fallback for layouts without a kernel here (structs,
// maps, dictionaries, ...): compute.Take with perm (logical indices of d).
func takeCompute(mem memory.Allocator, d arrow.ArrayData, perm []int32) (arrow.ArrayData, error) {
	arr := array.MakeFromData(d)
	defer arr.Release()
	idx := array.NewData(arrow.PrimitiveTypes.Int32, len(perm),
		[]*memory.Buffer{nil, memory.NewBufferBytes(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(perm))), 4*len(perm)))}, nil, 0, 0)
	defer idx.Release()
	indices := array.MakeFromData(idx)
	defer indices.Release()
	ctx := compute.WithAllocator(context.Background(), mem)
	out, err := compute.TakeArray(ctx, arr, indices)
	if err != nil {
		return nil, fmt.Errorf("taking %s column: %w", d.DataType(), err)
	}
	defer out.Release()
	od := out.Data()
	od.Retain()
	return od, nil
}

func scatterFixed[T any](dst, src []T, inv []int32) {
	src = src[:len(inv)]
	for k, q := range inv {
		dst[q] = src[k]
	}
}

// takeValidity permutes the validity bitmap; nil when there are no nulls.
func takeValidity(mem memory.Allocator, d arrow.ArrayData, off int, inv []int32) (*memory.Buffer, int) {
	if d.NullN() == 0 || d.Buffers()[0] == nil {
		return nil, 0
	}
	n := len(inv)
	out := newBuf(mem, (n+7)/8)
	set := scatterBits(out.Bytes(), d.Buffers()[0].Bytes(), off, inv)
	return out, n - set
}

// scatterBits sets dst bit inv[k] = src bit off+k and returns the number of
// set bits. dst is cleared first (allocators need not zero).
func scatterBits(dst, src []byte, off int, inv []int32) int {
	clear(dst)
	set := 0
	for k, q := range inv {
		i := off + k
		bit := (src[i>>3] >> (i & 7)) & 1
		dst[q>>3] |= bit << (q & 7)
		set += int(bit)
	}
	return set
}

// runCursor hands out output space within one run: next is where the
// run's next value goes, end where the run's space ends.
type runCursor[O int32 | int64] struct{ next, end O }

// runSpace returns one cursor per run for values whose sizes are
// offs[k+1]-offs[k], laid out run after run, and the total size.
func runSpace[O int32 | int64](offs []O, st streams) ([]runCursor[O], O) {
	cur := make([]runCursor[O], len(st.starts))
	ids := st.ids[:len(offs)-1]
	for k, b := range ids {
		cur[b].end += offs[k+1] - offs[k]
	}
	var pos O
	for b := range cur {
		size := cur[b].end
		cur[b] = runCursor[O]{next: pos, end: pos + size}
		pos += size
	}
	return cur, pos
}

// scatterVar permutes a variable-width (binary/utf8) column; offs are the
// n+1 offsets of the rows being moved.
//
// One pass sums every run's bytes, a second moves every value to its run's
// cursor and writes its offset. Values of up to 16 (32) bytes move as one
// (two) unaligned 16-byte load(s) and store(s) instead of a memmove call when
// the stores stay inside the run's space: the bytes they spill past the value
// belong to values of the same run, written later.
func scatterVar[O int32 | int64](mem memory.Allocator, offs []O, valBuf *memory.Buffer, inv []int32, st streams) (*memory.Buffer, *memory.Buffer) {
	n := len(inv)
	var z O
	ob := newBuf(mem, (n+1)*int(unsafe.Sizeof(z)))
	dstOffs := typed[O](ob.Bytes())[:n+1]
	cur, total := runSpace(offs, st)
	dstOffs[n] = total
	var src []byte
	if valBuf != nil {
		src = valBuf.Bytes()
	}
	vb := newBuf(mem, int(total)+32)
	dst := vb.Bytes()
	ids := st.ids[:n]
	offs = offs[:n+1]
	srcLen := O(len(src))
	for k, q := range inv {
		c := &cur[ids[k]]
		s, e, p := offs[k], offs[k+1], c.next
		c.next = p + e - s
		dstOffs[q] = p
		switch l := e - s; {
		case l <= 16 && p+16 <= c.end && s+16 <= srcLen:
			*(*[16]byte)(dst[p : p+16]) = *(*[16]byte)(src[s : s+16])
		case l <= 32 && p+32 <= c.end && s+32 <= srcLen:
			*(*[16]byte)(dst[p : p+16]) = *(*[16]byte)(src[s : s+16])
			*(*[16]byte)(dst[p+16 : p+32]) = *(*[16]byte)(src[s+16 : s+32])
		default:
			copy(dst[p:p+l], src[s:e])
		}
	}
	vb.ResizeNoShrink(int(total))
	return ob, vb
}

// scatterList permutes a list column: its offsets like a variable-width
// column's, and its child's element ranges to follow their rows (the
// child's runs are its rows' runs).
func scatterList[O int32 | int64](mem memory.Allocator, offs []O, child arrow.ArrayData, inv []int32, st streams) (*memory.Buffer, arrow.ArrayData, error) {
	n := len(inv)
	var z O
	ob := newBuf(mem, (n+1)*int(unsafe.Sizeof(z)))
	dstOffs := typed[O](ob.Bytes())[:n+1]
	cur, total := runSpace(offs, st)
	dstOffs[n] = total
	cst := streams{starts: make([]int32, len(cur))}
	for b, c := range cur {
		cst.starts[b] = int32(c.next)
	}
	// Child elements [offs[0], offs[n]) move with their rows.
	base := offs[0]
	m := int(offs[n] - base)
	// Both are written whole below (the rows' element ranges tile [0, m)),
	// so they come unzeroed from the scratch pool: fresh 4 MB slices per
	// list column per batch cost their zeroing and the collector's time.
	invp, idsp := getInt32s(m), getInt32s(m)
	defer putInt32s(invp)
	defer putInt32s(idsp)
	childInv := *invp
	cst.ids = *idsp
	ids := st.ids[:n]
	offs = offs[:n+1]
	for k, q := range inv {
		b := ids[k]
		c := &cur[b]
		s, e, p := offs[k], offs[k+1], c.next
		c.next = p + e - s
		dstOffs[q] = p
		ci := childInv[s-base : e-base]
		cb := cst.ids[s-base : e-base]
		for i := range ci {
			ci[i] = int32(p) + int32(i)
			cb[i] = b
		}
	}
	c, err := takeData(mem, child, int(base), childInv, cst)
	if err != nil {
		ob.Release()
		return nil, nil, err
	}
	return ob, c, nil
}
