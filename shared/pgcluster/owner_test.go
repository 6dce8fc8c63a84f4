package pgcluster

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// postmasterPID reads the server's pid from postmaster.pid (line 1).
func postmasterPID(t *testing.T, dir string) int {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		t.Fatal("empty postmaster.pid")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// processAlive: the process exists and is not a zombie (a postmaster that
// exited may wait to be reaped by whoever adopted it).
func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || !strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}

// deadPID returns the pid of a process that has exited (and been reaped).
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestStaleOwnedClusterIsStopped: a server left running by an owner that
// has exited (a crashed `sluice dev`) is stopped by the next owned Start,
// which then runs a fresh one; a server whose owner still runs is never
// stopped (the negative control), and this process's own server is
// adopted.
func TestStaleOwnedClusterIsStopped(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(clusterRoot(t), "pg")
	c, err := Start(ctx, Options{Dir: dir, Owned: true, Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Kill() })
	if o, ok := c.readOwner(); !ok || o.pid != os.Getpid() || o.start == "" {
		t.Fatalf("owner record %+v %v, want this process", o, ok)
	}
	first := postmasterPID(t, dir)

	// Our own server is adopted, not restarted.
	again, err := Start(ctx, Options{Dir: dir, Owned: true})
	if err != nil || again.StoppedStale() != 0 || postmasterPID(t, dir) != first {
		t.Fatalf("own server: stale %d, postmaster %d (was %d), %v", again.StoppedStale(), postmasterPID(t, dir), first, err)
	}

	// Negative control: an owner that still runs keeps its server.
	live := exec.Command("sleep", "300")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	if err := c.WriteOwner(live.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(ctx, Options{Dir: dir, Owned: true}); !errors.Is(err, ErrOwned) {
		t.Fatalf("Start over a live owner: %v, want ErrOwned", err)
	}
	if !processAlive(first) || postmasterPID(t, dir) != first {
		t.Fatal("the server of a live owner was stopped")
	}

	// The owner dies (kill -9 leaves the server running): the next Start
	// stops that server and runs a fresh one.
	// (The record carries a start time, as WriteOwner writes for a live
	// process, so a pid reused meanwhile by another process still reads as
	// exited.)
	dead := deadPID(t)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(dead)+" 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fresh, err := Start(ctx, Options{Dir: dir, Owned: true})
	if err != nil {
		t.Fatal(err)
	}
	if fresh.StoppedStale() != dead {
		t.Fatalf("StoppedStale = %d, want %d", fresh.StoppedStale(), dead)
	}
	if processAlive(first) {
		t.Fatalf("stale postmaster %d still runs", first)
	}
	if second := postmasterPID(t, dir); second == first || !processAlive(second) {
		t.Fatalf("no fresh postmaster: %d (stale %d)", second, first)
	}
	query(t, fresh.DSN("postgres"), "SELECT 'ok'")
	if o, _ := fresh.readOwner(); o.pid != os.Getpid() {
		t.Fatalf("owner after restart: %+v", o)
	}

	// A reused pid (same number, another start time) is not the owner.
	if (owner{pid: os.Getpid(), start: "1"}).alive() {
		t.Fatal("a pid with another start time counted as alive")
	}
}
