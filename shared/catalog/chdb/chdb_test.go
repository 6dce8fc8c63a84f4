package chdb

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFindLibchdb(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("CHDB_LIB_PATH", "")
	t.Setenv("XDG_CACHE_HOME", cache)

	_, err := FindLibchdb()
	if !errors.Is(err, ErrLibchdb) || !strings.Contains(err.Error(), "make build") || !strings.Contains(err.Error(), "deploy/fetch-libchdb.sh") {
		t.Fatalf("missing library: %v", err)
	}
	for _, v := range []string{"9.1.0", "26.5.3", "26.10.1", "26.9.9", "junk"} {
		dir := filepath.Join(cache, "sluice", "libchdb", v)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "libchdb.so"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// 26.10.1 has no library file (an interrupted fetch): skipped.
	if err := os.Remove(filepath.Join(cache, "sluice", "libchdb", "26.10.1", "libchdb.so")); err != nil {
		t.Fatal(err)
	}
	got, err := FindLibchdb()
	if err != nil || got != filepath.Join(cache, "sluice", "libchdb", "26.9.9", "libchdb.so") {
		t.Fatalf("newest version: %q %v", got, err)
	}
	t.Setenv("CHDB_LIB_PATH", "/nonexistent/libchdb.so")
	if _, err := FindLibchdb(); !errors.Is(err, ErrLibchdb) {
		t.Fatalf("bad CHDB_LIB_PATH: %v", err)
	}
}

// envChild names the test a child process runs (runInChild).
const envChild = "SLUICE_TEST_CHDB_CHILD"

// runInChild runs the calling test in a child process of the test binary and
// reports whether the caller is that child (then it runs the body). libchdb
// holds one engine per process: a test that needs its own engine directory
// must not share a process with chtest's engine or another such test.
func runInChild(t *testing.T, timeout time.Duration) bool {
	t.Helper()
	if os.Getenv(envChild) == t.Name() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"="+t.Name())
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("child process (%v):\n%s", err, out)
	}
	return false
}

func TestOpenEmbeddedSharesEngine(t *testing.T) {
	if !runInChild(t, 2*time.Minute) {
		return
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "catalog")
	a, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Exec(ctx, "CREATE TABLE shared_t (v Int64) ENGINE = MergeTree ORDER BY v"); err != nil {
		t.Fatal(err)
	}
	if err := a.Exec(ctx, "INSERT INTO shared_t VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.TempDir()); !errors.Is(err, ErrEngineInUse) {
		t.Fatalf("second directory: %v, want ErrEngineInUse", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Query(ctx, "SELECT 1"); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed handle: %v", err)
	}
	res, err := b.Query(ctx, "SELECT v FROM shared_t")
	if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != int64(42) {
		t.Fatalf("second handle after first closed: %v %v", res, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Data persists across an engine restart on the same directory.
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err = c.Query(ctx, "SELECT v FROM shared_t")
	if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != int64(42) {
		t.Fatalf("after restart: %v %v", res, err)
	}
	// A cancelled context is refused before the engine is touched.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Query(cctx, "SELECT 1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}
