package chtest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/chdb"
	"github.com/sluice-cdc/sluice/shared/catalog/chdbhttp"
	"github.com/sluice-cdc/sluice/shared/config"
)

// EnvServerURL names a real ClickHouse server (clickhouse://host:9000 or
// http://host:8123) to add to Backends; user and password come from
// SLUICE_TEST_CLICKHOUSE_USER / SLUICE_TEST_CLICKHOUSE_PASSWORD.
const EnvServerURL = "SLUICE_TEST_CLICKHOUSE_URL"

var (
	engineOnce sync.Once
	engine     *chdb.Conn
	engineDir  string
	engineErr  error

	shimOnce sync.Once
	shim     *httptest.Server

	seq atomic.Int64
)

// Engine returns the test binary's chDB engine, started on first use under a
// temporary directory (removed by Main).
func Engine(t testing.TB) *chdb.Conn {
	t.Helper()
	engineOnce.Do(func() {
		engineDir, engineErr = os.MkdirTemp("", fmt.Sprintf("sluice-chtest-%d-", os.Getpid()))
		if engineErr != nil {
			return
		}
		engine, engineErr = chdb.Open(filepath.Join(engineDir, "catalog"))
	})
	if engineErr != nil {
		t.Fatalf("chtest: starting chDB: %v", engineErr)
	}
	return engine
}

// Main runs the tests and then stops the engine and removes its directory:
// call it from TestMain (func TestMain(m *testing.M) { chtest.Main(m) }).
func Main(m interface{ Run() int }) {
	code := m.Run()
	Close()
	os.Exit(code)
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// newDatabaseName returns a unique, readable database name for t.
func newDatabaseName(t testing.TB, backend string) string {
	name := nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("t%d_%s_%s", seq.Add(1), backend, strings.Trim(name, "_"))
}

// createDatabase creates db on conn and drops it at t's cleanup.
func createDatabase(t testing.TB, conn catalog.Conn, db string) {
	t.Helper()
	ctx := context.Background()
	if err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatalf("chtest: creating database %s: %v", db, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
			t.Errorf("chtest: dropping database %s: %v", db, err)
		}
	})
}

// Database creates a fresh database on the test binary's chDB engine,
// dropped at t's cleanup, and returns its name.
func Database(t testing.TB) string {
	t.Helper()
	e := Engine(t)
	db := newDatabaseName(t, "chdb")
	createDatabase(t, e, db)
	return db
}

// Conn returns a chDB-backed catalog connection whose unqualified table
// names resolve in a fresh database (see Database).
func Conn(t testing.TB) catalog.Conn {
	t.Helper()
	c, _ := ConnDB(t)
	return c
}

// ConnDB is Conn, also returning the database name.
func ConnDB(t testing.TB) (*chdb.Conn, string) {
	t.Helper()
	db := Database(t)
	c := Engine(t).Database(db)
	t.Cleanup(func() { _ = c.Close() })
	return c, db
}

// Backend is one catalog engine a contract suite runs against.
type Backend struct {
	Name     string // chdb, clickhouse-go-http (over chdbhttp), server
	Conn     catalog.Conn
	Database string // the fresh database Conn's unqualified names resolve in
}

// ShimURL returns the base URL (http://127.0.0.1:port) of the test binary's
// chdbhttp server over the shared engine, started on first use.
func ShimURL(t testing.TB) string {
	t.Helper()
	e := Engine(t)
	shimOnce.Do(func() {
		shim = httptest.NewServer(chdbhttp.New(e, chdbhttp.Options{}))
	})
	return shim.URL
}

// Backends returns one connection per available backend, each on its own
// fresh database: chDB in-process, clickhouse-go (HTTP protocol) over the
// chdbhttp shim serving the same engine, and a real ClickHouse server when
// SLUICE_TEST_CLICKHOUSE_URL is set.
func Backends(t testing.TB) []Backend {
	t.Helper()
	ctx := context.Background()
	var out []Backend

	c, db := ConnDB(t)
	out = append(out, Backend{Name: "chdb", Conn: c, Database: db})

	db = newDatabaseName(t, "http")
	createDatabase(t, Engine(t), db)
	hc, err := catalog.OpenServer(ctx, config.Catalog{URL: ShimURL(t) + "/" + db})
	if err != nil {
		t.Fatalf("chtest: connecting clickhouse-go to chdbhttp: %v", err)
	}
	t.Cleanup(func() { _ = hc.Close() })
	out = append(out, Backend{Name: "clickhouse-go-http", Conn: hc, Database: db})

	if raw := os.Getenv(EnvServerURL); raw != "" {
		cfg := config.Catalog{URL: raw, User: os.Getenv("SLUICE_TEST_CLICKHOUSE_USER"), Password: os.Getenv("SLUICE_TEST_CLICKHOUSE_PASSWORD")}
		admin, err := catalog.OpenServer(ctx, cfg)
		if err != nil {
			t.Fatalf("chtest: connecting to %s: %v", EnvServerURL, err)
		}
		t.Cleanup(func() { _ = admin.Close() })
		db = newDatabaseName(t, "server")
		createDatabase(t, admin, db)
		cfg.URL = withDatabase(raw, db)
		sc, err := catalog.OpenServer(ctx, cfg)
		if err != nil {
			t.Fatalf("chtest: connecting to %s database %s: %v", EnvServerURL, db, err)
		}
		t.Cleanup(func() { _ = sc.Close() })
		out = append(out, Backend{Name: "server", Conn: sc, Database: db})
	}
	return out
}

// withDatabase replaces the path of a clickhouse URL by /db.
func withDatabase(raw, db string) string {
	rest := raw
	q := ""
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest, q = rest[:i], rest[i:]
	}
	scheme := ""
	if i := strings.Index(rest, "://"); i >= 0 {
		scheme, rest = rest[:i+3], rest[i+3:]
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	return scheme + rest + "/" + db + q
}

// Close stops the shim and the engine and removes the engine's directory
// (what Main does after the tests; for TestMains that wrap m.Run themselves).
func Close() {
	if shim != nil {
		shim.Close()
	}
	if engine != nil {
		_ = engine.Close()
	}
	if engineDir != "" {
		_ = os.RemoveAll(engineDir)
	}
}
