package pgcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestPassword: a cluster started with Options.Password refuses a TCP
// connection without it (or with a wrong one) and accepts DSN, which
// carries it; a new cluster gets it from initdb, and one initialized and
// running without a password (the demo clusters of earlier versions) gets
// it on its next Start, which also restarts it onto the password's
// hba_file. Negative control: without the password the same TCP
// connection is accepted (trust).
func TestPassword(t *testing.T) {
	ctx := context.Background()
	root := clusterRoot(t)
	bare := func(c *Cluster, pw string) error {
		u := "postgres"
		if pw != "" {
			u += ":" + pw
		}
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", u, c.Port()))
		if err == nil {
			conn.Close(ctx)
		}
		return err
	}
	check := func(c *Cluster, what string) {
		t.Helper()
		for _, pw := range []string{"", "wrong"} {
			if err := bare(c, pw); err == nil || !strings.Contains(err.Error(), "password authentication failed") {
				t.Fatalf("%s: TCP with password %q: %v, want refused", what, pw, err)
			}
		}
		if got := query(t, c.DSN("postgres"), "SELECT current_setting('hba_file')"); got != filepath.Join(c.Dir(), hbaFile) {
			t.Fatalf("%s: hba_file %s", what, got)
		}
	}

	fresh, err := Start(ctx, Options{Dir: filepath.Join(root, "fresh"), Password: "s3cret-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fresh.Kill() })
	check(fresh, "new cluster")
	if !strings.Contains(fresh.DSN("db"), "postgres:s3cret-1@") {
		t.Fatalf("DSN %s does not carry the password", fresh.DSN("db"))
	}

	dir := filepath.Join(root, "old")
	old, err := Start(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Kill() })
	if err := bare(old, ""); err != nil {
		t.Fatalf("negative control: a trust cluster refused a passwordless TCP connection: %v", err)
	}
	// Adopted while running without one.
	adopted, err := Start(ctx, Options{Dir: dir, Password: "s3cret-2"})
	if err != nil {
		t.Fatal(err)
	}
	check(adopted, "a running cluster without a password")
	if err := adopted.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := Start(ctx, Options{Dir: dir, Password: "s3cret-2"})
	if err != nil {
		t.Fatal(err)
	}
	check(again, "restarted")
}
