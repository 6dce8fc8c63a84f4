//go:build linux

package packstore

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PutMany's barriers. Hundreds of small packs per group commit (1,000
// tenants flushed every second) cost two fsyncs each — the file, then its
// directory — and even overlapped, a few hundred fsyncs hold a group commit
// for seconds on a loaded disk. syncfs(2) makes everything written to the
// store's filesystem durable in one call, so a group commit costs two: one
// after the temp files are written (the data barrier, before any is linked)
// and one after the links (the metadata barrier). It may also write out
// other processes' dirty pages on that filesystem, which the kernel would
// write back anyway. Linux reports writeback errors from syncfs only since
// 5.8; before that the store fsyncs every file and directory as before.

// syncfsReliable is whether this kernel's syncfs reports writeback errors.
var syncfsReliable = kernelAtLeast(5, 8)

func (d *DirStore) syncfs() error {
	f, err := os.Open(d.root)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(parts[0])
	mnr, err2 := strconv.Atoi(strings.TrimLeftFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > major || maj == major && mnr >= minor
}
