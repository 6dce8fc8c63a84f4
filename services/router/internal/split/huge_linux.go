//go:build linux

package split

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks for transparent huge pages under b, a buffer just
// allocated (and so all zero) that nothing has read or written yet. The Go
// heap may hand over memory already backed by 4 KiB pages, which a later
// MADV_HUGEPAGE alone does not change (khugepaged collapses it minutes
// later, if ever): so the whole pages of b are dropped first
// (MADV_DONTNEED: on private anonymous memory they read back as zeros, the
// contents b has anyway) and fault back in as huge pages on first write.
// A refusal (THP off, an old kernel) only costs the speed-up.
func adviseHuge(b []byte) {
	const page = 4096
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := int((page - addr%page) % page)
	hi := lo + (len(b)-lo)&^(page-1)
	if hi-lo < page {
		return
	}
	in := b[lo:hi]
	if syscall.Madvise(in, syscall.MADV_HUGEPAGE) != nil {
		return
	}
	_ = syscall.Madvise(in, syscall.MADV_DONTNEED)
}
