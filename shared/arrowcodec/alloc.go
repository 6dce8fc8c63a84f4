package arrowcodec

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// MaxDecodedSize bounds the memory one Decode may allocate (decompressed
// buffers included), so a corrupt length prefix cannot exhaust memory.
const MaxDecodedSize = 1 << 30

// decodeAllocator wraps the caller's allocator for one Decode. It bounds
// what the decode may allocate and remembers every live allocation, so that
// when the decode fails it can return what arrow's IPC reader leaked on its
// error paths (it recovers panics internally and drops buffers it had
// allocated). Buffers of a successfully decoded batch keep using it: Free
// forwards to the caller's allocator.
type decodeAllocator struct {
	mem   memory.Allocator
	limit int

	mu    sync.Mutex // guards live, total
	live  map[*byte]int
	total int
}

func newDecodeAllocator(mem memory.Allocator, limit int) *decodeAllocator {
	return &decodeAllocator{mem: mem, limit: limit, live: map[*byte]int{}}
}

type errBudget struct{ size, limit int }

func (e errBudget) Error() string {
	return fmt.Sprintf("allocation of %d bytes exceeds the decode budget of %d bytes", e.size, e.limit)
}

func (a *decodeAllocator) track(b []byte) {
	if cap(b) == 0 {
		return
	}
	a.live[unsafe.SliceData(b)] = len(b)
}

func (a *decodeAllocator) Allocate(size int) []byte {
	a.mu.Lock()
	if size < 0 || a.total+size > a.limit {
		a.mu.Unlock()
		panic(errBudget{size, a.limit}) // recovered by the IPC reader or by Decode
	}
	a.total += size
	a.mu.Unlock()
	b := a.mem.Allocate(size)
	a.mu.Lock()
	a.track(b)
	a.mu.Unlock()
	return b
}

func (a *decodeAllocator) Reallocate(size int, b []byte) []byte {
	a.mu.Lock()
	if size < 0 || a.total-len(b)+size > a.limit {
		a.mu.Unlock()
		panic(errBudget{size, a.limit})
	}
	a.total += size - len(b)
	if cap(b) > 0 {
		delete(a.live, unsafe.SliceData(b))
	}
	a.mu.Unlock()
	nb := a.mem.Reallocate(size, b)
	a.mu.Lock()
	a.track(nb)
	a.mu.Unlock()
	return nb
}

func (a *decodeAllocator) Free(b []byte) {
	a.mu.Lock()
	if cap(b) > 0 {
		delete(a.live, unsafe.SliceData(b))
	}
	a.total -= len(b)
	a.mu.Unlock()
	a.mem.Free(b)
}

// releaseLeaked frees every allocation still live. Call it only when the
// decode failed and nothing it allocated is referenced any more.
func (a *decodeAllocator) releaseLeaked() {
	a.mu.Lock()
	leaked := a.live
	a.live = map[*byte]int{}
	a.mu.Unlock()
	for p, n := range leaked {
		a.mem.Free(unsafe.Slice(p, n))
	}
}
