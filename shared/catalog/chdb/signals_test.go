//go:build linux && amd64

package chdb

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The signal trap: libchdb installs its own SIGSEGV/SIGBUS/SIGFPE handlers
// when the engine starts, after which a Go nil dereference hangs instead of
// panicking. These tests run the scenario in a child process (a regression
// must fail, not hang the suite).

const envSignalChild = "SLUICE_TEST_SIGNAL_CHILD" // "restore" or "norestore"

var nilTarget *struct{ x int }

//go:noinline
func derefNil() int { return nilTarget.x }

// TestSignalChild is the child's body; it does nothing in a normal run.
func TestSignalChild(t *testing.T) {
	mode := os.Getenv(envSignalChild)
	if mode == "" || os.Getenv(envChild) != "" {
		t.Skip("child process of TestNilDerefRecoversAfterChDB")
	}
	restoreSignals.Store(mode == "restore")
	c, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Query(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	recovered := func() (r any) {
		defer func() { r = recover() }()
		return derefNil()
	}()
	if recovered == nil {
		t.Fatal("nil dereference did not panic")
	}
	os.Stdout.WriteString("CHILD-RECOVERED: " + strings.ReplaceAll(toString(recovered), "\n", " ") + "\n")
	res, err := c.Query(ctx, "SELECT sum(number) FROM numbers(1000)")
	if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != uint64(499500) {
		t.Fatalf("engine after the recovered panic: %v %v", res, err)
	}
	os.Stdout.WriteString("CHILD-ENGINE-OK\n")
	_ = c.Close()
}

func toString(v any) string {
	if e, ok := v.(error); ok {
		return e.Error()
	}
	if s, ok := v.(string); ok {
		return s
	}
	return "non-error panic value"
}

func runSignalChild(t *testing.T, mode string, timeout time.Duration) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSignalChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envSignalChild+"="+mode)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return out.String(), err
}

// TestNilDerefRecoversAfterChDB: with the restore on, a nil dereference
// after the engine started is a recoverable panic and the engine keeps
// answering.
func TestNilDerefRecoversAfterChDB(t *testing.T) {
	out, err := runSignalChild(t, "restore", 90*time.Second)
	if err != nil || !strings.Contains(out, "CHILD-RECOVERED: runtime error: invalid memory address or nil pointer dereference") || !strings.Contains(out, "CHILD-ENGINE-OK") {
		t.Fatalf("child failed (%v):\n%s", err, out)
	}
	t.Logf("child output:\n%s", out)
}

// TestNilDerefNegativeControl switches the restore off: the same child must
// fail (hang until killed, or crash) without ever recovering. This is the
// proof that the restore is what makes the positive test pass.
func TestNilDerefNegativeControl(t *testing.T) {
	if testing.Short() {
		t.Skip("negative control waits for a hung child; skipped in -short")
	}
	out, err := runSignalChild(t, "norestore", 8*time.Second)
	if err == nil || strings.Contains(out, "CHILD-RECOVERED") {
		t.Fatalf("with the restore off the child should hang or crash, got err=%v:\n%s", err, out)
	}
	t.Logf("negative control failed as expected: %v", err)
}

// TestSignalHandlersAreGo checks the installed handlers directly: after the
// engine starts, SIGSEGV/SIGBUS/SIGFPE/SIGILL carry the Go runtime's handler
// (the one on SIGURG).
func TestSignalHandlersAreGo(t *testing.T) {
	if !runInChild(t, 2*time.Minute) {
		return
	}
	c, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Query(context.Background(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	goH := signalHandler(sigURG)
	for _, s := range syncSignals {
		if h := signalHandler(s); h != goH {
			t.Errorf("signal %v handler %#x, want the Go runtime's %#x", s, h, goH)
		}
	}
}
