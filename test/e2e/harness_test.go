package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

func TestMain(m *testing.M) {
	if _, err := kit.SluiceBin(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	pgtest.Shutdown()
	kit.Cleanup()
	os.Exit(code)
}

// sluice is one `sluice dev` process.
type sluice struct {
	t      testing.TB
	dev    *kit.Dev
	server string
}

// newSluice writes a `sluice dev` config capturing tables of dsn. env adds
// SLUICE_* overrides.
func newSluice(t testing.TB, dsn string, tables []string, env ...string) *sluice {
	src := kit.Source{DSN: dsn, Tables: tables}
	d, err := kit.NewDev(t.TempDir(), src, kit.Settings{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	s := &sluice{t: t, dev: d, server: d.Server()}
	t.Cleanup(func() { _ = d.P.Stop(60 * time.Second) })
	return s
}

func (s *sluice) start() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := s.dev.EnsureRunning(ctx); err != nil {
		s.t.Fatal(err)
	}
}

// startLive starts sluice dev on src's tables and waits until it has caught
// up with the source; the context it returns ends with the test (10 min at
// most), and the logs are kept when the test fails (artifacts).
func startLive(t *testing.T, src *pg, tables []string, env ...string) (*sluice, context.Context) {
	t.Helper()
	s := newSluice(t, src.dsn, tables, env...)
	t.Cleanup(func() { artifacts(t, s.dev.Dir) })
	s.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("pipeline never live: %v\n%s", err, s.tail())
	}
	return s, ctx
}

func (s *sluice) tail() string { return s.dev.Tail() }

func (s *sluice) cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return kit.CLI(ctx, s.server, args...)
}

// pg is the source database.
type pg struct {
	t   testing.TB
	dsn string
}

func (p *pg) exec(sql string, args ...any) {
	p.t.Helper()
	conn, err := pgx.Connect(context.Background(), p.dsn)
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		p.t.Fatalf("%s: %v", sql, err)
	}
}

// tryExec runs sql and returns its error.
func (p *pg) tryExec(sql string, args ...any) error {
	conn, err := pgx.Connect(context.Background(), p.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), sql, args...)
	return err
}

func (p *pg) strings(sql string, args ...any) []string {
	p.t.Helper()
	conn, err := pgx.Connect(context.Background(), p.dsn)
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), sql, args...)
	if err != nil {
		p.t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		p.t.Fatalf("%s: %v", sql, err)
	}
	return out
}

func (p *pg) lsn() string { return p.strings("SELECT pg_current_wal_lsn()::text")[0] }

// oracle compares every tenant's copy of table with the source and returns
// the rows checked and the differences.
func oracle(t testing.TB, src *pg, s *sluice, table string, keys []string) (int, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := kit.Check(ctx, src.dsn, s.server, kit.CheckOptions{Tables: []kit.Table{{Name: table, Keys: keys, Routing: "tenant_id"}}})
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	t.Log(rep)
	return rep.Rows, rep.Diffs
}

// artifacts keeps a failed test's logs: SLUICE_E2E_KEEP=dir copies them.
func artifacts(t testing.TB, dir string) {
	keep := os.Getenv("SLUICE_E2E_KEEP")
	if keep == "" || !t.Failed() {
		return
	}
	dst := filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
	_ = os.MkdirAll(dst, 0o755)
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		_ = os.WriteFile(filepath.Join(dst, filepath.Base(l)), b, 0o644)
	}
	t.Logf("logs kept in %s", dst)
}
