package split

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// take gathers arr at the row indices perm (indices into arr's logical
// rows) into a new array allocated from mem: out[j] = arr[perm[j]]. It has a
// hand-written kernel for every layout the wire carries (fixed width, bool,
// binary/utf8 with 32- and 64-bit offsets, lists) and falls back to
// compute.Take for anything else.
func take(mem memory.Allocator, arr arrow.Array, perm []int32) (arrow.Array, error) {
	data, err := takeData(mem, arr.Data(), perm)
	if err != nil {
		return nil, err
	}
	defer data.Release()
	return array.MakeFromData(data), nil
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

// typed views a buffer's bytes as []T. The buffer is 64-byte aligned by
// every arrow allocator, and T is a plain fixed-size type.
func typed[T any](b []byte) []T {
	var z T
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}

func takeData(mem memory.Allocator, d arrow.ArrayData, perm []int32) (arrow.ArrayData, error) {
	n := len(perm)
	off := d.Offset()
	bufs := d.Buffers()
	validity, nulls := takeValidity(mem, d, perm)

	switch dt := d.DataType().(type) {
	case *arrow.NullType:
		if validity != nil {
			validity.Release()
		}
		return array.NewData(dt, n, []*memory.Buffer{nil}, nil, n, 0), nil
	case *arrow.BooleanType:
		out := newBuf(mem, (n+7)/8)
		gatherBits(out.Bytes(), bufs[1].Bytes(), off, perm)
		return newData(dt, n, []*memory.Buffer{validity, out}, nil, nulls), nil
	case *arrow.StringType, *arrow.BinaryType:
		offs, vals := gatherVar[int32](mem, typed[int32](bufs[1].Bytes()), bufs[2], off, d.Len(), perm)
		return newData(dt, n, []*memory.Buffer{validity, offs, vals}, nil, nulls), nil
	case *arrow.LargeStringType, *arrow.LargeBinaryType:
		offs, vals := gatherVar[int64](mem, typed[int64](bufs[1].Bytes()), bufs[2], off, d.Len(), perm)
		return newData(dt, n, []*memory.Buffer{validity, offs, vals}, nil, nulls), nil
	case *arrow.ListType:
		offs, child, err := gatherList[int32](mem, typed[int32](bufs[1].Bytes()), d.Children()[0], off, perm)
		if err != nil {
			releaseBufs([]*memory.Buffer{validity})
			return nil, err
		}
		defer child.Release()
		return newData(dt, n, []*memory.Buffer{validity, offs}, []arrow.ArrayData{child}, nulls), nil
	case *arrow.LargeListType:
		offs, child, err := gatherList[int64](mem, typed[int64](bufs[1].Bytes()), d.Children()[0], off, perm)
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
			gatherFixed(typed[uint8](out.Bytes()), typed[uint8](src)[off:], perm)
		case 2:
			gatherFixed(typed[uint16](out.Bytes()), typed[uint16](src)[off:], perm)
		case 4:
			gatherFixed(typed[uint32](out.Bytes()), typed[uint32](src)[off:], perm)
		case 8:
			gatherFixed(typed[uint64](out.Bytes()), typed[uint64](src)[off:], perm)
		default:
			dst := out.Bytes()
			for j, p := range perm {
				s := (off + int(p)) * w
				copy(dst[j*w:(j+1)*w], src[s:s+w])
			}
		}
		return newData(dt, n, []*memory.Buffer{validity, out}, nil, nulls), nil
	}
	releaseBufs([]*memory.Buffer{validity})
	return takeCompute(mem, d, perm)
}

func newData(dt arrow.DataType, n int, bufs []*memory.Buffer, children []arrow.ArrayData, nulls int) arrow.ArrayData {
	d := array.NewData(dt, n, bufs, children, nulls, 0)
	releaseBufs(bufs) // NewData retained them
	return d
}

// takeCompute is the fallback for layouts without a kernel here (structs,
// maps, dictionaries, ...).
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

func gatherFixed[T any](dst, src []T, perm []int32) {
	dst = dst[:len(perm)]
	for j, p := range perm {
		dst[j] = src[p]
	}
}

// takeValidity gathers the validity bitmap; nil when the input has no nulls.
func takeValidity(mem memory.Allocator, d arrow.ArrayData, perm []int32) (*memory.Buffer, int) {
	if d.NullN() == 0 || d.Buffers()[0] == nil {
		return nil, 0
	}
	n := len(perm)
	out := newBuf(mem, (n+7)/8)
	set := gatherBits(out.Bytes(), d.Buffers()[0].Bytes(), d.Offset(), perm)
	return out, n - set
}

// gatherBits writes dst bit j = src bit (off+perm[j]) for every j, a byte at
// a time (dst need not be zeroed), and returns the number of set bits.
func gatherBits(dst, src []byte, off int, perm []int32) int {
	set := 0
	var cur byte
	for j, p := range perm {
		i := off + int(p)
		bit := (src[i>>3] >> (i & 7)) & 1
		cur |= bit << (j & 7)
		set += int(bit)
		if j&7 == 7 {
			dst[j>>3] = cur
			cur = 0
		}
	}
	if len(perm)&7 != 0 {
		dst[len(perm)>>3] = cur
	}
	return set
}

// gatherVar gathers a variable-width (binary/utf8) column: new offsets and
// the concatenated value bytes, in one pass over perm.
func gatherVar[O int32 | int64](mem memory.Allocator, offs []O, valBuf *memory.Buffer, off, srcLen int, perm []int32) (*memory.Buffer, *memory.Buffer) {
	n := len(perm)
	var z O
	ob := newBuf(mem, (n+1)*int(unsafe.Sizeof(z)))
	dstOffs := typed[O](ob.Bytes())[:n+1]
	offs = offs[off : off+srcLen+1]
	var src []byte
	if valBuf != nil {
		src = valBuf.Bytes()
	}
	// The gathered bytes never exceed the input's: perm has no repeats.
	vb := newBuf(mem, int(offs[srcLen]-offs[0]))
	dst := vb.Bytes()
	var pos O
	for j, p := range perm {
		s, e := offs[p], offs[p+1]
		dstOffs[j] = pos
		pos += O(copy(dst[pos:], src[s:e]))
	}
	dstOffs[n] = pos
	vb.Resize(int(pos))
	return ob, vb
}

// gatherList gathers a list column: new offsets, and the child gathered at
// the concatenated element ranges of the taken rows.
func gatherList[O int32 | int64](mem memory.Allocator, offs []O, child arrow.ArrayData, off int, perm []int32) (*memory.Buffer, arrow.ArrayData, error) {
	n := len(perm)
	var z O
	ob := newBuf(mem, (n+1)*int(unsafe.Sizeof(z)))
	dstOffs := typed[O](ob.Bytes())[:n+1]
	offs = offs[off:]
	var pos O
	for j, p := range perm {
		dstOffs[j] = pos
		pos += offs[p+1] - offs[p]
	}
	dstOffs[n] = pos
	childPerm := make([]int32, 0, int(pos))
	for _, p := range perm {
		for k := offs[p]; k < offs[p+1]; k++ {
			childPerm = append(childPerm, int32(k))
		}
	}
	c, err := takeData(mem, child, childPerm)
	if err != nil {
		ob.Release()
		return nil, nil, err
	}
	return ob, c, nil
}
