package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/shared/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(&mainWrapper{m})
}

// mainWrapper stops the cluster after the tests and before goleak looks.
type mainWrapper struct{ m *testing.M }

func (w *mainWrapper) Run() int {
	code := w.m.Run()
	pgtest.Shutdown()
	return code
}

func TestNewDBLogicalAndCleanup(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	pgtest.Cluster(t)
	t.Logf("cluster start (initdb + pg_ctl start): %s", time.Since(start))
	start = time.Now()
	pgtest.NewDB(t)
	t.Logf("NewDB: %s", time.Since(start))
	var name string
	t.Run("db", func(t *testing.T) {
		dsn := pgtest.NewDB(t)
		pgtest.Exec(t, dsn, `CREATE TABLE t (id int primary key, v text); INSERT INTO t VALUES (1, 'a')`)
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var wal, tz string
		if err := conn.QueryRow(ctx, `SELECT current_setting('wal_level'), current_setting('TimeZone'), current_database()`).Scan(&wal, &tz, &name); err != nil {
			t.Fatal(err)
		}
		if wal != "logical" || tz != "UTC" {
			t.Fatalf("wal_level=%s TimeZone=%s", wal, tz)
		}
		// A logical slot, left behind on purpose: cleanup must drop it.
		if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot('s1', 'pgoutput')`); err != nil {
			t.Fatal(err)
		}
	})
	conn, err := pgx.Connect(ctx, pgtest.Cluster(t).DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var dbs, slots int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_database WHERE datname = $1),
		(SELECT count(*) FROM pg_replication_slots WHERE database = $1)`, name).Scan(&dbs, &slots); err != nil {
		t.Fatal(err)
	}
	if dbs != 0 || slots != 0 {
		t.Fatalf("after cleanup: %d databases, %d slots named %s", dbs, slots, name)
	}
}

func TestParallelNewDB(t *testing.T) {
	for i := 0; i < 4; i++ {
		t.Run("p", func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.NewDB(t)
			pgtest.Exec(t, dsn, `CREATE TABLE x (a int)`)
		})
	}
}

func TestKillRestart(t *testing.T) {
	ctx := context.Background()
	c := pgtest.Cluster(t)
	dsn := pgtest.NewDB(t)
	pgtest.Exec(t, dsn, `CREATE TABLE k (a int); INSERT INTO k VALUES (7)`)
	port := c.Port()
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if c.Running(ctx) {
		t.Fatal("running after Kill")
	}
	start := time.Now()
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart after crash took %s", time.Since(start))
	if c.Port() != port {
		t.Fatalf("port moved from %d to %d", port, c.Port())
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var a int
	if err := conn.QueryRow(ctx, `SELECT a FROM k`).Scan(&a); err != nil || a != 7 {
		t.Fatalf("after restart: a=%d err=%v", a, err)
	}
}

// Version and Major name the server the cluster runs: the binaries'
// version agrees with what the server itself reports.
func TestVersionIsTheServers(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ver string
	var num int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int`).Scan(&ver, &num); err != nil {
		t.Fatal(err)
	}
	if got := pgtest.Version(t); got != ver {
		t.Errorf("Version() = %q, the server says %q", got, ver)
	}
	if got := pgtest.Major(t); got != num/10000 {
		t.Errorf("Major() = %d, the server's server_version_num is %d", got, num)
	}
	t.Logf("Postgres %s (major %d)", ver, num/10000)
}
