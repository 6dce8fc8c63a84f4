package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ownerFile, in the data directory, records the process that started (or
// adopted) the server when Options.Owned is set: "pid start-time\n", the
// start time being field 22 of /proc/<pid>/stat, so a pid the kernel has
// reused for another process does not count as the owner.
const ownerFile = "sluice.owner"

type owner struct {
	pid   int
	start string // "" when /proc was unreadable
}

func self() owner { return owner{pid: os.Getpid(), start: procStart(os.Getpid())} }

// procStart returns the start time of process pid (clock ticks since boot),
// or "" when it cannot be read.
func procStart(pid int) string {
	f := procStat(pid)
	if len(f) < 20 {
		return ""
	}
	return f[19] // field 22
}

// procStat returns the fields of /proc/<pid>/stat from field 3 (the
// state) on, or nil.
func procStat(pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	// The command (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// alive reports whether the recorded owner still runs.
func (o owner) alive() bool {
	if o.pid <= 0 {
		return false
	}
	if err := syscall.Kill(o.pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	f := procStat(o.pid)
	if len(f) > 0 && f[0] == "Z" {
		return false // exited, not yet reaped
	}
	if o.start == "" || len(f) < 20 {
		return true
	}
	return f[19] == o.start
}

func (c *Cluster) readOwner() (owner, bool) {
	b, err := os.ReadFile(filepath.Join(c.dir, ownerFile))
	if err != nil {
		return owner{}, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return owner{}, false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return owner{}, false
	}
	o := owner{pid: pid}
	if len(f) > 1 {
		o.start = f[1]
	}
	return o, true
}

// WriteOwner records process pid as the owner of the cluster (Start does it
// for the calling process when Options.Owned is set).
func (c *Cluster) WriteOwner(pid int) error {
	o := owner{pid: pid, start: procStart(pid)}
	path := filepath.Join(c.dir, ownerFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %s\n", o.pid, o.start)), 0o600); err != nil {
		return fmt.Errorf("recording the cluster owner: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("recording the cluster owner: %w", err)
	}
	return nil
}

// reclaim runs before an owned Start adopts a running server: a server
// whose recorded owner has exited is left over from a crash and is stopped
// (fast) so a fresh one starts; one whose owner still runs (another
// process) is refused with ErrOwned. A server with no owner record, or
// owned by this process, is adopted as before.
func (c *Cluster) reclaim(ctx context.Context) error {
	if !c.Running(ctx) {
		return nil
	}
	o, ok := c.readOwner()
	if !ok {
		return nil
	}
	me := self()
	if o.pid == me.pid && (o.start == "" || me.start == "" || o.start == me.start) {
		return nil
	}
	if o.alive() {
		return fmt.Errorf("%w: the server in %s belongs to process %d, which still runs", ErrOwned, c.dir, o.pid)
	}
	if err := c.Stop(ctx); err != nil {
		return fmt.Errorf("stopping the server left by exited process %d: %w", o.pid, err)
	}
	c.stale = o.pid
	return nil
}

// StoppedStale returns the pid of the exited owner whose server Start
// stopped before starting a fresh one, or 0.
func (c *Cluster) StoppedStale() int { return c.stale }
