package stack

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDataDirLock: one process at a time holds data_dir; a clean exit
// leaves no predecessor, a death (the lock released by the kernel, the file
// not emptied) names the dead instance to the next one, and a second live
// holder is refused with the holder's pid.
func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	defer func(w time.Duration) { lockWait = w }(lockWait)
	lockWait = 300 * time.Millisecond
	pred, lock, err := lockDataDir(dir, "a-1-x")
	if err != nil || pred != "" {
		t.Fatalf("first lock: pred=%q err=%v", pred, err)
	}
	if _, _, err := lockDataDir(dir, "b-2-y"); !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), "process ") {
		t.Fatalf("second live holder: %v, want ErrDataDirInUse naming the process", err)
	}
	if err := lock.release(); err != nil {
		t.Fatal(err)
	}
	pred, lock, err = lockDataDir(dir, "c-3-z")
	if err != nil || pred != "" {
		t.Fatalf("after a clean exit: pred=%q err=%v, want none", pred, err)
	}
	// c dies: its file closes without emptying the file (what the kernel
	// does for a killed process).
	lock.f.Close()
	pred, lock, err = lockDataDir(dir, "d-4-w")
	if err != nil || pred != "c-3-z" {
		t.Fatalf("after a death: pred=%q err=%v, want c-3-z", pred, err)
	}
	// A restart right after a kill -9 can come before the dying holder's
	// exit released the lock: it waits for it, within lockWait.
	lockWait = 5 * time.Second
	go func(f *os.File) { time.Sleep(200 * time.Millisecond); f.Close() }(lock.f)
	pred, lock, err = lockDataDir(dir, "e-5-v")
	if err != nil || pred != "d-4-w" {
		t.Fatalf("after a slow death: pred=%q err=%v, want d-4-w", pred, err)
	}
	_ = lock.release()
}

// TestSecondDevRefused: a second process on a data_dir whose embedded
// stack is open is refused before it touches the NATS store.
func TestSecondDevRefused(t *testing.T) {
	cfg := devConfig(t)
	ctx := context.Background()
	st, err := Open(ctx, cfg, "test", Needs{EmbeddedNATS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	defer func(w time.Duration) { lockWait = w }(lockWait)
	lockWait = 300 * time.Millisecond
	if _, err := Open(ctx, cfg, "test", Needs{EmbeddedNATS: true}); !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("second open: %v, want ErrDataDirInUse", err)
	}
	if !strings.HasPrefix(st.HolderID("flusher"), st.Instance+"/") {
		t.Fatalf("holder %q is not under instance %q", st.HolderID("flusher"), st.Instance)
	}
}
