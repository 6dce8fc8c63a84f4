package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/state"
)

// A process's instance id names it in every lease its services hold
// (HolderID: instance + "/" + service): host, pid and a random suffix, so
// no two processes, and no two runs of one, ever share it.
func newInstanceID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "sluice"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
}

// HolderID is the lease holder id of service in this process.
func (s *Stack) HolderID(service string) string { return s.Instance + "/" + service }

// LockFile is the file in data_dir that `sluice dev` locks for its
// lifetime: it holds the running instance's id, and is emptied at a clean
// exit.
const LockFile = "sluice.lock"

// ErrDataDirInUse: another live process holds data_dir's lock.
var ErrDataDirInUse = errors.New("data_dir is in use by another sluice dev")

// lockRecord is LockFile's content.
type lockRecord struct {
	Instance string    `json:"instance"`
	PID      int       `json:"pid"`
	Started  time.Time `json:"started"`
}

// lockWait is how long a process waits for data_dir's lock held by
// another before refusing to start.
var lockWait = 10 * time.Second

// dataDirLock is data_dir's lock, held for the process's lifetime.
type dataDirLock struct{ f *os.File }

// release empties the lock file (a clean exit: no predecessor for the
// next process) and releases the lock.
func (l *dataDirLock) release() error {
	defer l.f.Close()
	return writeAll(l.f, nil)
}

// lockDataDir takes data_dir's lock for instance (flock, released by the
// kernel when the process dies, however it dies) and returns the instance
// the file still names: a predecessor that did not exit cleanly, and that
// is certainly dead now, since its lock was free. Two `sluice dev` on one
// data_dir would share the embedded NATS store and the catalog: the second
// is refused.
func lockDataDir(dir, instance string) (predecessor string, _ *dataDirLock, err error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("opening %s: %w", path, err)
	}
	var prev lockRecord
	// A holder killed a moment ago releases the lock when its exit
	// completes (a restart right after kill -9 can be quicker): wait for
	// it a little before refusing.
	held, err := tryLock(f)
	for deadline := time.Now().Add(lockWait); err == nil && !held && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		held, err = tryLock(f)
	}
	if err != nil {
		f.Close()
		return "", nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if b, _ := os.ReadFile(path); len(b) > 0 && canLock {
		_ = json.Unmarshal(b, &prev) // unreadable: no predecessor to recover from
	}
	if !held {
		f.Close()
		who := "another process"
		if prev.PID != 0 {
			who = "process " + strconv.Itoa(prev.PID)
		}
		return "", nil, fmt.Errorf("%w: %s holds %s; stop it, or give this one another data_dir", ErrDataDirInUse, who, path)
	}
	b, _ := json.Marshal(lockRecord{Instance: instance, PID: os.Getpid(), Started: time.Now().UTC()})
	if err := writeAll(f, b); err != nil {
		f.Close()
		return "", nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return prev.Instance, &dataDirLock{f}, nil
}

// writeAll replaces f's content with b, durably.
func writeAll(f *os.File, b []byte) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Sync()
}

// recoverFrom hands on at once what a dead predecessor instance (proven
// dead by data_dir's lock) left held, instead of waiting out its TTLs and
// AckWaits: its state leases (reader, flusher partitions and membership),
// its publisher lease in the catalog, and the messages the embedded NATS
// server had delivered to it unacked. Each step is only faster than
// waiting; one that fails is logged and left to the timeouts.
// ARCHITECTURE.md "Recovery after a crash".
func (s *Stack) recoverFrom(ctx context.Context, predecessor string) {
	log := s.Log.With("predecessor", predecessor)
	if s.NATS != nil {
		reset, err := natsx.ResetPending(ctx, s.JS)
		if err != nil {
			log.Warn("redelivering what the previous sluice dev had in flight: left to AckWait", "err", err)
		} else if len(reset) > 0 {
			log.Info("the previous sluice dev exited with messages in flight: delivering them again now", "consumers", reset)
		}
	}
	if s.State != nil {
		names, err := state.NewLeases(s.State, s.Cfg.State.Schema).ReleaseInstance(ctx, predecessor)
		if err != nil {
			log.Warn("releasing the previous sluice dev's leases: left to their TTL", "err", err)
		} else if len(names) > 0 {
			log.Info("released the leases the previous sluice dev held when it died", "leases", names)
		}
	}
	if s.Catalog != nil {
		cat := catalog.New(s.Catalog, catalog.Options{Prefix: s.Cfg.Catalog.Prefix, Log: s.Log})
		released, err := cat.ReleaseInstanceLease(ctx, predecessor)
		if err != nil {
			log.Warn("releasing the previous sluice dev's publisher lease: left to its TTL", "err", err)
		} else if released {
			log.Info("released the publisher lease the previous sluice dev held when it died")
		}
	}
}
