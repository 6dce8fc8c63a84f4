package reader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/pgcluster"
	"github.com/sluice-cdc/sluice/shared/pgtest"
)

// pgPair is a primary and a hot standby streaming from it (a physical
// slot, hot_standby_feedback on), each a cluster of its own.
type pgPair struct {
	primary, standby *pgcluster.Cluster
	major            int
}

// binDirOrSkip finds server binaries of Postgres min..max (max 0: any
// newer): without them the test fails under CI and skips elsewhere, saying
// how to get them.
func binDirOrSkip(t *testing.T, find func() (string, error)) string {
	t.Helper()
	bindir, err := find()
	if err != nil {
		msg := fmt.Sprintf("%v: run make pg-bins (deploy/fetch-postgres.sh)", err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bindir
}

// startPair starts a primary and its standby from bindir; standbySettings
// are added to the standby's.
func startPair(t *testing.T, bindir string, standbySettings map[string]string) *pgPair {
	t.Helper()
	root, err := os.MkdirTemp("", "sluice-reader-standby-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	// The server runs as user postgres when we are root: let it reach its dir.
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(root, "primary"), BinDir: bindir, Settings: pgtest.Settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	if err := p.Watchdog(os.Getpid(), ""); err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for k, v := range pgtest.Settings {
		settings[k] = v
	}
	for k, v := range standbySettings {
		settings[k] = v
	}
	s, err := pgcluster.StartStandby(ctx, p, pgcluster.StandbyOptions{Options: pgcluster.Options{Dir: filepath.Join(root, "standby"), Settings: settings}, Slot: "sluice_standby"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Kill() })
	if err := s.Watchdog(os.Getpid(), ""); err != nil {
		t.Fatal(err)
	}
	major, err := pgcluster.ServerMajor(bindir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Postgres %d primary on port %d, standby on port %d", major, p.Port(), s.Port())
	return &pgPair{primary: p, standby: s, major: major}
}

// database creates db on the primary, runs sql in it and waits until the
// standby has replayed both.
func (pp *pgPair) database(t *testing.T, db, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pp.primary.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if sql != "" {
		pgtest.Exec(t, pp.primary.DSN(db), sql)
	}
	pp.caughtUp(t, db)
}

// caughtUp waits until the standby has replayed the primary's WAL as it
// is now.
func (pp *pgPair) caughtUp(t *testing.T, db string) {
	t.Helper()
	ctx := context.Background()
	var at string
	if err := pgxQueryRow(ctx, pp.primary.DSN(db), `SELECT pg_current_wal_lsn()::text`, &at); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		var ok bool
		if err := pgxQueryRow(ctx, pp.standby.DSN(db), `SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn`, &ok, at); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the standby has not replayed %s yet", at)
		}
		return nil
	})
}

func pgxQueryRow(ctx context.Context, dsn, sql string, dst any, args ...any) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql, args...).Scan(dst)
}

// onStandby points the env's reader at the pair: source.dsn the standby,
// source.primary_dsn the primary (the state stays on the test cluster).
func (e *env) onStandby(pp *pgPair, db string) {
	e.cfg.Source.DSN = pp.standby.DSN(db)
	e.cfg.Source.PrimaryDSN = pp.primary.DSN(db)
}

// runRefused runs a reader to its refusal and returns it.
func (e *env) runRefused(t *testing.T) error {
	t.Helper()
	r := e.newReader("refused", nil)
	pool := e.statePool()
	defer pool.Close()
	r.deps.State = pool
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := r.Run(ctx)
	if !errors.Is(err, source.ErrInvalidSource) {
		t.Fatalf("the reader returned %v, want a refusal (ErrInvalidSource)", err)
	}
	return err
}

// TestStandbyRefusals: what the reader refuses at start, before it writes
// anything, when source.dsn reaches a standby (Postgres 16+) or
// source.primary_dsn does not fit, each message saying what to set; the
// primary with source.primary_dsn naming itself is accepted (the control).
func TestStandbyRefusals(t *testing.T) {
	bindir := binDirOrSkip(t, func() (string, error) { return pgcluster.BinDirAtLeast(source.StandbyVersion) })
	pp := startPair(t, bindir, nil)
	pp.database(t, "app", schemaSQL)
	other := pgtest.NewDB(t) // another cluster
	ctx := context.Background()
	check := func(dsn, primary string) error {
		t.Helper()
		src, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		ver, err := source.ReadServerVersion(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		var pri source.Querier
		if primary != "" {
			p, err := pgxpool.New(ctx, primary)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			pri = p
		}
		_, err = source.CheckRole(ctx, src, ver, pri)
		return err
	}

	t.Run("no_primary_dsn", func(t *testing.T) {
		// The whole reader: refused at start, today's text kept, the new
		// key named.
		e := newEnv(t, "public.items")
		e.cfg.Source.DSN = pp.standby.DSN("app")
		err := e.runRefused(t)
		for _, want := range []string{"connects to a standby", "target_session_attrs=read-write", "source.primary_dsn"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal %q does not say %q", err, want)
			}
		}
		if n := slotsOn(t, pp.standby.DSN("app")); n != 0 {
			t.Errorf("the refused reader left %d logical slots on the standby", n)
		}
	})
	for _, tc := range []struct {
		name, dsn, primary, want string
	}{
		{"primary_dsn_is_a_standby", pp.standby.DSN("app"), pp.standby.DSN("app"), "source.primary_dsn connects to a standby"},
		{"primary_dsn_another_cluster", pp.standby.DSN("app"), other, "another cluster"},
		{"primary_with_another_primary_dsn", pp.primary.DSN("app"), other, "leave source.primary_dsn unset"},
		{"primary_with_its_own_primary_dsn", pp.primary.DSN("app"), pp.primary.DSN("app"), ""},
		{"standby_with_primary_dsn", pp.standby.DSN("app"), pp.primary.DSN("app"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := check(tc.dsn, tc.primary)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, source.ErrInvalidSource) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckRole = %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
	t.Run("hot_standby_feedback_off", func(t *testing.T) {
		pgtest.Exec(t, pp.standby.DSN("app"), `ALTER SYSTEM SET hot_standby_feedback = off`)
		pgtest.Exec(t, pp.standby.DSN("app"), `SELECT pg_reload_conf()`)
		t.Cleanup(func() {
			pgtest.Exec(t, pp.standby.DSN("app"), `ALTER SYSTEM RESET hot_standby_feedback`)
			pgtest.Exec(t, pp.standby.DSN("app"), `SELECT pg_reload_conf()`)
		})
		var err error
		eventually(t, 10*time.Second, func() error {
			if err = check(pp.standby.DSN("app"), pp.primary.DSN("app")); err == nil {
				return errors.New("accepted")
			}
			return nil
		})
		if !errors.Is(err, source.ErrInvalidSource) || !strings.Contains(err.Error(), "hot_standby_feedback = on") {
			t.Fatalf("CheckRole = %v, want a refusal naming hot_standby_feedback = on", err)
		}
	})
}

// slotsOn counts the logical slots of a server.
func slotsOn(t *testing.T, dsn string) int {
	t.Helper()
	var n int
	if err := pgxQueryRow(context.Background(), dsn, `SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical'`, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// binDirBelow16 is a folder of Postgres 14 or 15 server binaries.
func binDirBelow16() (string, error) {
	dirs := []string{os.Getenv("SLUICE_PG_BINDIR"), "/usr/lib/postgresql/15/bin", filepath.Join(pgcluster.CacheDir, "15", "bin"), filepath.Join(pgcluster.CacheDir, "14", "bin")}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if v, err := pgcluster.ServerMajor(d); err == nil && v >= source.MinServerMajor && v < source.StandbyVersion {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: no Postgres 14 or 15 (looked in %s)", pgcluster.ErrNoBinaries, strings.Join(dirs[1:], ", "))
}

// TestStandbyRefusedBefore16: a standby of Postgres 15 (or 14) with
// source.primary_dsn set is refused at start with a message naming its
// version and the version decoding from a standby needs.
func TestStandbyRefusedBefore16(t *testing.T) {
	bindir := binDirOrSkip(t, binDirBelow16)
	pp := startPair(t, bindir, nil)
	pp.database(t, "app", schemaSQL)
	e := newEnv(t, "public.items")
	e.onStandby(pp, "app")
	err := e.runRefused(t)
	want, _ := pgcluster.Version(bindir)
	for _, s := range []string{"standby of Postgres " + want, "Postgres 16 or newer"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the refusal %q does not say %q", err, s)
		}
	}
}
