package split

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Pool is a memory.Allocator that keeps freed buffers for reuse, bounded by
// a byte budget. The split allocates ~100 bytes per row and frees it all a
// few milliseconds later (once every part is published); reusing the same
// buffers spares the page faults and zeroing of fresh memory, which cost as
// much as the take itself. Buffers are NOT zeroed: every kernel in take.go
// writes every byte of the lengths it allocates.
//
// Buffers below minPooled bytes come from the Go heap directly. Size
// classes are powers of two. Safe for concurrent use.
type Pool struct {
	mu     sync.Mutex // guards free and pooled
	free   [maxClass + 1][][]byte
	pooled int64
	limit  int64
}

// poolHugePages asks the kernel to back new pooled buffers of hugeMin bytes
// or more with transparent huge pages (adviseHuge). The take writes each
// column to thousands of scattered runs at once; with 4 KiB pages nearly
// every write of a 10K-run take misses the TLB, and on a loaded machine
// the page walks miss the caches too. Off: the benchmark's baseline.
var poolHugePages = true

// hugeMin is the smallest buffer worth huge pages: it spans at least one
// whole 2 MiB page wherever it starts. A variable so that tests can put
// small buffers through adviseHuge too.
var hugeMin = 4 << 20

const (
	minClass  = 12 // 4 KiB
	maxClass  = 34 // 16 GiB: larger requests are not pooled
	alignment = 64
)

// NewPool returns a pool that keeps at most limit bytes of free buffers.
func NewPool(limit int64) *Pool { return &Pool{limit: limit} }

var _ memory.Allocator = (*Pool)(nil)

func class(size int) int { return bits.Len(uint(size - 1)) }

func alignedMake(size int) []byte {
	b := make([]byte, size+alignment)
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	shift := int((alignment - addr%alignment) % alignment)
	return b[shift : shift+size : shift+size]
}

// Allocate returns a buffer of size bytes, 64-byte aligned, not zeroed
// when it is reused.
func (p *Pool) Allocate(size int) []byte {
	c := class(size)
	if c < minClass || c > maxClass {
		return alignedMake(size)
	}
	p.mu.Lock()
	if l := len(p.free[c]); l > 0 {
		b := p.free[c][l-1]
		p.free[c][l-1] = nil
		p.free[c] = p.free[c][:l-1]
		p.pooled -= int64(cap(b))
		p.mu.Unlock()
		return b[:size]
	}
	p.mu.Unlock()
	b := alignedMake(1 << c)
	if poolHugePages && len(b) >= hugeMin {
		adviseHuge(b)
	}
	return b[:size]
}

// Reallocate grows b to size, in place when its capacity allows.
func (p *Pool) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		return b[:size]
	}
	nb := p.Allocate(size)
	copy(nb, b)
	p.Free(b)
	return nb
}

// Free returns b to the pool, or to the garbage collector when the pool is
// full or b is not of a pooled class.
func (p *Pool) Free(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 {
		return
	}
	k := bits.Len(uint(c)) - 1
	if k < minClass || k > maxClass {
		return
	}
	p.mu.Lock()
	if p.pooled+int64(c) <= p.limit {
		p.free[k] = append(p.free[k], b[:0])
		p.pooled += int64(c)
	}
	p.mu.Unlock()
}

// Pooled reports the bytes of free buffers the pool holds.
func (p *Pool) Pooled() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pooled
}
