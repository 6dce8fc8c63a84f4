package pgcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// StandbyOptions configures a streaming standby of a primary (StartStandby).
type StandbyOptions struct {
	// Options of the standby's own cluster: Dir must not exist or be empty;
	// Settings are added to (and override) the standby settings below.
	Options
	// Slot is the physical replication slot the standby streams from
	// (primary_slot_name), created on the primary if missing; "" streams
	// without one.
	Slot string
	// DB is the database named in primary_conninfo (the slot
	// synchronization worker connects to it); "" names none.
	DB string
	// SyncSlots sets sync_replication_slots = on (Postgres 17+): the
	// standby keeps copies of the primary's failover logical slots.
	SyncSlots bool
}

// StartStandby makes a streaming standby of primary from a cold copy of
// its data directory: primary is stopped (fast), its directory copied into
// opts.Dir (without its pid, log and owner files and its replication
// slots), primary started again on
// its port; the copy gets standby.signal and primary_conninfo (user
// postgres on 127.0.0.1, trust auth), hot_standby_feedback = on, and
// primary_slot_name / sync_replication_slots as opts say, and is started.
// It only reads primary's directory, which pgcluster made too.
func StartStandby(ctx context.Context, primary *Cluster, opts StandbyOptions) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: StandbyOptions.Dir is empty", ErrBadDir)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving standby directory %s: %w", opts.Dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err == nil {
		return nil, fmt.Errorf("%w: standby directory %s already holds a cluster", ErrBadDir, dir)
	}
	if opts.Slot != "" {
		if err := primary.ensurePhysicalSlot(ctx, opts.Slot); err != nil {
			return nil, err
		}
	}
	s, err := newClusterIn(dir, primary.bindir)
	if err != nil {
		return nil, err
	}
	if err := s.prepareDir(); err != nil {
		return nil, err
	}
	if err := primary.Stop(ctx); err != nil {
		return nil, err
	}
	out, cerr := exec.CommandContext(ctx, "cp", "-a", primary.dir+"/.", dir).CombinedOutput()
	if err := primary.start(ctx); err != nil {
		return nil, fmt.Errorf("starting the primary again after copying it: %w", err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("copying %s to the standby %s: %w: %s", primary.dir, dir, cerr, bytes.TrimSpace(out))
	}
	for _, f := range []string{"postmaster.pid", "postmaster.opts", logFile, ownerFile} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("preparing the standby %s: %w", dir, err)
		}
	}
	// The primary's slots are not the standby's (pg_basebackup skips them
	// too): a copied logical slot would block its synchronization ("same
	// name slot already exists on the standby").
	slots, _ := filepath.Glob(filepath.Join(dir, "pg_replslot", "*"))
	for _, sl := range slots {
		if err := os.RemoveAll(sl); err != nil {
			return nil, fmt.Errorf("preparing the standby %s: %w", dir, err)
		}
	}
	sig := filepath.Join(dir, "standby.signal")
	if err := os.WriteFile(sig, nil, 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", sig, err)
	}
	if err := s.chown(sig); err != nil {
		return nil, err
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=%s", primary.Port(), pgUser, filepath.Base(dir))
	if opts.DB != "" {
		conninfo += " dbname=" + opts.DB
	}
	settings := map[string]string{"primary_conninfo": conninfo, "hot_standby": "on", "hot_standby_feedback": "on"}
	if opts.Slot != "" {
		settings["primary_slot_name"] = opts.Slot
	}
	if opts.SyncSlots {
		settings["sync_replication_slots"] = "on"
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	o := opts.Options
	o.Dir, o.Settings, o.Template, o.BinDir = dir, settings, "", primary.bindir
	return Start(ctx, o)
}

func (c *Cluster) ensurePhysicalSlot(ctx context.Context, slot string) error {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("connecting to create physical slot %s: %w", slot, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, `SELECT pg_create_physical_replication_slot($1, true)
		WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot)
	if err != nil {
		return fmt.Errorf("creating physical slot %s: %w", slot, err)
	}
	return nil
}

// Promote ends recovery on a standby (pg_ctl promote) and waits until it
// accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	secs := strconv.Itoa(int(c.timeout.Seconds()))
	if out, err := c.run(ctx, "pg_ctl", "promote", "-D", c.dir, "-w", "-t", secs); err != nil {
		return fmt.Errorf("promoting the standby in %s: %w: %s", c.dir, err, bytes.TrimSpace(out))
	}
	return nil
}

// KillHard sends SIGKILL to the postmaster and every process it started, as
// `kill -9` of the whole server: no shutdown, no checkpoint, connections
// cut. The next Start runs crash recovery.
func (c *Cluster) KillHard() error {
	b, err := os.ReadFile(filepath.Join(c.dir, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("reading the postmaster pid of %s: %w", c.dir, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 1 {
		return fmt.Errorf("reading the postmaster pid of %s: %q", c.dir, b)
	}
	children := childrenOf(pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing postmaster %d: %w", pid, err)
	}
	for _, ch := range children {
		_ = syscall.Kill(ch, syscall.SIGKILL) // one may have exited already
	}
	return nil
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st := procStat(p); len(st) > 1 && st[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// CacheDir is where deploy/fetch-postgres.sh puts the server binaries of
// other Postgres majors: CacheDir/<major>/bin.
const CacheDir = "/var/cache/sluice/postgres"

// BinDirAtLeast returns a folder of server binaries of Postgres major or
// newer: $SLUICE_PG_BINDIR when its version is, else CacheDir/<m>/bin or
// /usr/lib/postgresql/<m>/bin for the lowest m >= major there is.
func BinDirAtLeast(major int) (string, error) {
	var looked []string
	if d := os.Getenv("SLUICE_PG_BINDIR"); d != "" {
		looked = append(looked, d)
		if v, err := ServerMajor(d); err == nil && v >= major {
			return d, nil
		}
	}
	for m := major; m < major+10; m++ {
		for _, d := range []string{filepath.Join(CacheDir, strconv.Itoa(m), "bin"), filepath.Join("/usr/lib/postgresql", strconv.Itoa(m), "bin")} {
			looked = append(looked, d)
			if v, err := ServerMajor(d); err == nil && v >= major {
				return d, nil
			}
		}
	}
	return "", fmt.Errorf("%w: no Postgres %d or newer (looked in %s; deploy/fetch-postgres.sh puts them in %s)", ErrNoBinaries, major, strings.Join(looked[:min(len(looked), 6)], ", "), CacheDir)
}

// ServerMajor runs `postgres --version` from bindir and returns its major.
func ServerMajor(bindir string) (int, error) {
	if !hasServer(bindir) {
		return 0, fmt.Errorf("%w in %s", ErrNoBinaries, bindir)
	}
	out, err := exec.Command(filepath.Join(bindir, "postgres"), "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("running %s/postgres --version: %w", bindir, err)
	}
	// "postgres (PostgreSQL) 17.2 (Debian ...)"
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return 0, fmt.Errorf("reading the version of %s/postgres: %q", bindir, out)
	}
	v, err := strconv.Atoi(strings.SplitN(f[2], ".", 2)[0])
	if err != nil {
		return 0, fmt.Errorf("reading the version of %s/postgres: %q", bindir, out)
	}
	return v, nil
}
