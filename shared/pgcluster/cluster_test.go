package pgcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// clusterRoot returns a directory the postgres user can traverse
// (t.TempDir's parents are 0700 when we run as root).
func clusterRoot(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "sluice-pgcluster-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	return root
}

func query(t *testing.T, dsn, q string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, q).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s
}

func TestStartSettingsAdoptRestart(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(clusterRoot(t), "pg")
	c, err := Start(ctx, Options{Dir: dir, Settings: map[string]string{
		"fsync":            "off",
		"application_name": "it's quoted", // needs quoting and escaping
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Kill() })
	for q, want := range map[string]string{
		`SELECT current_setting('wal_level')`:             "logical",
		`SELECT current_setting('TimeZone')`:              "UTC",
		`SELECT current_setting('fsync')`:                 "off",
		`SELECT current_setting('max_replication_slots')`: "64",
		`SELECT current_setting('listen_addresses')`:      "127.0.0.1",
	} {
		if got := query(t, c.DSN("postgres"), q); got != want {
			t.Errorf("%s = %q, want %q", q, got, want)
		}
	}
	if err := c.CreateDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateDatabase(ctx, "app"); err != nil {
		t.Fatalf("second CreateDatabase: %v", err)
	}
	query(t, c.DSN("app"), `SELECT 'ok'`)

	// A second Start on a running directory adopts the server.
	c2, err := Start(ctx, Options{Dir: dir})
	if err != nil || c2.Port() != c.Port() {
		t.Fatalf("adopt: port %d vs %d, %v", c2.Port(), c.Port(), err)
	}
	// Stop, then Start again on the initialized directory: same port.
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Running(ctx) {
		t.Fatal("running after Stop")
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("stopping a stopped cluster: %v", err)
	}
	c3, err := Start(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if c3.Port() != c.Port() {
		t.Fatalf("port moved from %d to %d", c.Port(), c3.Port())
	}
	query(t, c3.DSN("app"), `SELECT 'ok'`)
	if err := c3.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	query(t, c3.DSN("app"), `SELECT 'ok'`)
}

func TestBadDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the traversal check applies when running as root")
	}
	locked, err := os.MkdirTemp("", "sluice-pgcluster-locked-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(locked)
	_, err = Start(context.Background(), Options{Dir: filepath.Join(locked, "pg")})
	if !errors.Is(err, ErrBadDir) || !strings.Contains(err.Error(), "not traversable") {
		t.Fatalf("err = %v", err)
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"off": "off", "32MB": "32MB", "64": "64", "1.5": "1.5",
		"127.0.0.1": "'127.0.0.1'", "": "''", "a b": "'a b'", "it's": "'it''s'",
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}
