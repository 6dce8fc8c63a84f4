//go:build linux && amd64

package chdb

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelSigaction is struct sigaction as the linux/amd64 rt_sigaction
// syscall takes it: handler, flags, restorer, mask (one 64-bit word).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// restoreSignals switches the fix off in negative-control tests.
var restoreSignals atomic.Bool

func init() { restoreSignals.Store(true) }

const sigURG = unix.SIGURG

// syncSignals are the signals a fault in Go code raises; the Go runtime turns
// them into panics only while its own handler is installed.
var syncSignals = []unix.Signal{unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE, unix.SIGILL}

func rtSigaction(sig unix.Signal, act, old *kernelSigaction) error {
	_, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig),
		uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), 8, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// restoreGoSignalHandlers undoes what libchdb does when it starts: it
// installs its own SIGSEGV/SIGBUS/SIGFPE handlers, after which a Go nil
// dereference no longer panics but hangs the process. The Go runtime uses one
// handler (with one set of flags and mask) for every signal it handles, and
// libchdb leaves SIGURG alone, so SIGURG's action is the Go runtime's: copy it
// onto the synchronous fault signals.
func restoreGoSignalHandlers() {
	if !restoreSignals.Load() {
		return
	}
	var goAct kernelSigaction
	if err := rtSigaction(sigURG, nil, &goAct); err != nil || goAct.handler == 0 {
		return
	}
	for _, s := range syncSignals {
		var cur kernelSigaction
		if err := rtSigaction(s, nil, &cur); err != nil {
			continue
		}
		if cur != goAct {
			_ = rtSigaction(s, &goAct, nil)
		}
	}
}

var firstQuery sync.Once

// firstQueryDone restores the handlers once more after the engine's first
// query, in case libchdb installs them lazily.
func firstQueryDone() { firstQuery.Do(restoreGoSignalHandlers) }

// signalHandler returns the handler address installed for sig (tests).
func signalHandler(sig unix.Signal) uintptr {
	var cur kernelSigaction
	if err := rtSigaction(sig, nil, &cur); err != nil {
		return 0
	}
	return cur.handler
}
