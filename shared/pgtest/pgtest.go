package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/shared/pgcluster"
)

var (
	once     sync.Once
	shared   *pgcluster.Cluster
	root     string
	startErr error
	dbSeq    atomic.Int64
	// version and bindir are the running server's ("17.10") and the folder
	// of its binaries, for the tests' logs.
	version, bindir string
)

// Settings are the postgresql.conf settings of the test cluster. fsync and
// full_page_writes are off (a test never loses power), but synchronous_commit
// stays on: with it off, Kill (an immediate stop, as a crash) loses commits
// that were already acknowledged, which crash tests must never see.
var Settings = map[string]string{
	"fsync":            "off",
	"full_page_writes": "off",
	"shared_buffers":   "32MB",
	"max_wal_size":     "1GB",
	"log_min_messages": "warning",
}

// SettingsEnv adds settings to Settings for a run, as name=value pairs
// separated by commas, e.g. to make Postgres stream every transaction past
// 64 kB to the reader (source.protocol 2):
// SLUICE_PG_SETTINGS=logical_decoding_work_mem=64kB.
const SettingsEnv = "SLUICE_PG_SETTINGS"

func start() {
	for _, kv := range strings.Split(os.Getenv(SettingsEnv), ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k != "" {
			Settings[k] = v
		}
	}
	root = filepath.Join(os.TempDir(), "sluice-pgtest-"+strconv.Itoa(os.Getpid()))
	reapStale()
	if err := os.MkdirAll(root, 0o777); err != nil {
		startErr = fmt.Errorf("creating %s: %w", root, err)
		return
	}
	// The server runs as user postgres when we are root: let it reach its dir.
	if err := os.Chmod(root, 0o777); err != nil {
		startErr = fmt.Errorf("opening %s to the postgres user: %w", root, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := pgcluster.Options{Dir: filepath.Join(root, "data"), Settings: Settings}
	var err error
	if bindir, err = pgcluster.BinDir(); err != nil {
		startErr = err
		os.RemoveAll(root)
		return
	}
	if version, err = pgcluster.Version(bindir); err != nil {
		startErr = err
		os.RemoveAll(root)
		return
	}
	// An initdb'd template shared by every test binary of this machine user:
	// copying it is about twice as fast as initdb. Best effort. It is keyed
	// on the binaries' folder and their version: a folder whose binaries
	// were replaced by another version's never hands out the old one's.
	tpl := templateDir(bindir, version)
	if pgcluster.InitTemplate(ctx, tpl) == nil {
		opts.Template = tpl
	}
	c, err := pgcluster.Start(ctx, opts)
	if err != nil {
		startErr = err
		os.RemoveAll(root)
		return
	}
	if err := c.Watchdog(os.Getpid(), root); err != nil {
		startErr = err
		_ = c.Kill()
		os.RemoveAll(root)
		return
	}
	shared = c
	fmt.Fprintf(os.Stderr, "pgtest: Postgres %s (%s) on port %d\n", version, bindir, c.Port())
}

// templateDir is the initdb'd template of the server binaries in bindir at
// version, for this machine user.
func templateDir(bindir, version string) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("sluice-pgtest-template-%s-%s-%d",
		nonIdent.ReplaceAllString(strings.ToLower(bindir), "_"),
		nonIdent.ReplaceAllString(strings.ToLower(version), "_"), os.Geteuid()))
}

// reapStale removes clusters left by test binaries that died before their
// watchdog could run (e.g. the machine rebooted mid-test).
func reapStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "sluice-pgtest-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "sluice-pgtest-"))
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			continue // a server may still run there; its watchdog owns it
		}
		os.RemoveAll(d)
	}
}

func processAlive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// Cluster returns the test binary's shared cluster, starting it on first
// use. It fails the test if Postgres cannot start.
func Cluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	once.Do(start)
	if startErr != nil {
		t.Fatalf("pgtest: starting the test Postgres cluster: %v", startErr)
	}
	return shared
}

// Version returns the version of the test cluster's server ("17.10"),
// starting it on first use.
func Version(t testing.TB) string {
	t.Helper()
	Cluster(t)
	return version
}

// Major returns the major version of the test cluster's server (17),
// starting it on first use: a test of a feature that only some versions
// have gates on it, and says so.
func Major(t testing.TB) int {
	t.Helper()
	v := Version(t)
	n, err := strconv.Atoi(v[:strings.IndexFunc(v+".", func(r rune) bool { return r < '0' || r > '9' })])
	if err != nil {
		t.Fatalf("pgtest: the server version %q does not start with a major version number", v)
	}
	return n
}

// Main runs the tests, then stops the shared cluster and removes its files.
// Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Shutdown()
	os.Exit(code)
}

// Shutdown stops the shared cluster (if it was started) and removes its
// files. For TestMain functions that must do more than Main does.
func Shutdown() {
	if shared == nil {
		return
	}
	_ = shared.Kill() // its data is disposable: no checkpoint needed
	os.RemoveAll(root)
	shared = nil
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDB creates a fresh database on the shared cluster and returns its DSN.
// At cleanup it terminates the database's sessions and walsenders, drops
// its replication slots and drops the database.
func NewDB(t testing.TB) string {
	t.Helper()
	c := Cluster(t)
	name := nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("t%d_%s", dbSeq.Add(1), strings.Trim(name, "_"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.CreateDatabase(ctx, name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Logf("pgtest: database %s on Postgres %s (%s)", name, version, bindir)
	t.Cleanup(func() {
		if err := dropDB(c, name); err != nil {
			t.Logf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return c.DSN(name)
}

func dropDB(c *pgcluster.Cluster, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.Background())
	for {
		// Walsenders of logical slots are sessions of the database too.
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid()`, name); err != nil {
			return fmt.Errorf("terminating sessions: %w", err)
		}
		var left int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM (
			SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE database = $1 AND NOT active) d`, name).Scan(&left)
		if err != nil {
			return fmt.Errorf("dropping replication slots: %w", err)
		}
		var active int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, name).Scan(&active); err != nil {
			return fmt.Errorf("counting replication slots: %w", err)
		}
		if active == 0 {
			break
		}
		select { // a terminated walsender releases its slot within milliseconds
		case <-ctx.Done():
			return fmt.Errorf("%d replication slots stay active: %w", active, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return err
	}
	return nil
}

// Exec runs sql (one or more statements, simple protocol) on dsn and fails
// the test on error.
func Exec(t testing.TB, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connecting to %s: %v", dsn, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("pgtest: executing %q: %v", sql, err)
	}
}
