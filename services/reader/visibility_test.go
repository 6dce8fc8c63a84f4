package reader

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/pgtest"
)

// TestTOASTFetchWaitsForVisibility: a commit reaches the replication
// stream once its WAL is flushed, before the committing backend leaves the
// proc array, so for a moment other sessions do not see it. A moved row's
// unchanged TOAST value read in that moment is missing, and would reach the
// new destination as NULL (rule 6; the multi-process soak hit it about once
// per 30,000 moved rows). The test holds that moment open with the real
// server: a synchronous standby that does not exist keeps the mover's
// commit flushed and decoded but invisible until the test lets it go. The
// reader must wait for the commit to become visible; with the wait off
// (the negative control) the row arrives with its value missing.
func TestTOASTFetchWaitsForVisibility(t *testing.T) {
	for _, wait := range []bool{true, false} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			moved := moveInvisible(t, !wait)
			filled := moved.vals["body"] == strings.Repeat("v", 100<<10) && len(moved.unchanged) == 0
			switch {
			case wait && !filled:
				t.Errorf("moved row: body of %d chars, unchanged %v; want the 100 KB value read once the commit was visible",
					len(fmt.Sprint(moved.vals["body"])), moved.unchanged)
			case !wait && filled:
				t.Errorf("negative control: without the wait the moved row still carries its value; the test cannot catch a read before visibility")
			case !wait:
				t.Logf("negative control bit: without the wait the moved row arrived with body %v, unchanged %v", moved.vals["body"], moved.unchanged)
			}
		})
	}
}

// moveInvisible moves a row with a 100 KB TOASTed body to another tenant in
// a transaction held invisible after its commit was flushed, lets it go once
// the reader has read the row (noWait) or waited for it, and returns the
// moved row as the reader published it.
func moveInvisible(t *testing.T, noWait bool) row {
	ctx := context.Background()
	e := newEnv(t, "public.docs")
	e.exec(`CREATE TABLE docs (tenant_id text, id int, body text, n int, PRIMARY KEY (tenant_id, id));
		ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;`)
	// Every session but the mover's commits without waiting for a standby;
	// the standby named does not exist. Set before the reader connects, so
	// all its sessions start with synchronous_commit = local.
	syncRep(t, e.dsn, `ALTER SYSTEM SET synchronous_commit = 'local'; ALTER SYSTEM SET synchronous_standby_names = 'sluice_no_such_standby'`)
	t.Cleanup(func() {
		syncRep(t, e.dsn, `ALTER SYSTEM RESET synchronous_commit; ALTER SYSTEM RESET synchronous_standby_names`)
	})
	eventually(t, 10*time.Second, func() error {
		return showIs(ctx, e.dsn, "synchronous_standby_names", "sluice_no_such_standby")
	})
	r := e.newReader("a", func(r *Reader) { r.noFetchWait = noWait })
	run := e.start(r)
	waitStreaming(t, run)
	e.exec(`INSERT INTO docs VALUES ('t1', 1, '` + strings.Repeat("v", 100<<10) + `', 0)`)

	mover, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer mover.Close(ctx)
	var pid int
	if _, err := mover.Exec(ctx, `SET synchronous_commit = 'on'`); err != nil {
		t.Fatal(err)
	}
	if err := mover.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := mover.Exec(ctx, `UPDATE docs SET tenant_id = 't2', n = 1 WHERE id = 1`)
		done <- err
	}()
	eventually(t, 10*time.Second, func() error {
		var ev string
		if err := pgx.BeginFunc(ctx, run.pool, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&ev)
		}); err != nil {
			return err
		}
		select {
		case err := <-done:
			t.Fatalf("the move committed without waiting for the standby (%v): the test did not hold its commit invisible", err)
		default:
		}
		if ev != "SyncRep" {
			return fmt.Errorf("mover waits on %q, want SyncRep", ev)
		}
		return nil
	})
	// The commit is flushed, so the reader decodes it; it either reads the
	// row at once (noWait: the read misses it) or waits.
	eventually(t, 20*time.Second, func() error {
		if testutil.ToFloat64(r.metrics.FetchWaits) > 0 {
			return nil
		}
		if rows, _, _ := e.changes(); len(rows) >= 3 {
			return nil
		}
		return fmt.Errorf("the reader neither waited nor published the move")
	})
	syncRep(t, e.dsn, `ALTER SYSTEM RESET synchronous_standby_names`)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("move: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the move was not released")
	}
	for _, rw := range waitRows(t, e, 3) {
		if rw.op == proto.OpUpdate {
			return rw
		}
	}
	t.Fatal("no update row")
	return row{}
}

// syncRep runs ALTER SYSTEM statements on the test cluster and reloads its
// configuration.
func syncRep(t *testing.T, dsn, stmts string) {
	t.Helper()
	for _, s := range append(strings.Split(stmts, ";"), "SELECT pg_reload_conf()") {
		if s = strings.TrimSpace(s); s != "" {
			pgtest.Exec(t, dsn, s)
		}
	}
}

// showIs checks a setting as a new session sees it.
func showIs(ctx context.Context, dsn, name, want string) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var v string
	if err := c.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
		return err
	}
	if v != want {
		return fmt.Errorf("%s = %q, want %q", name, v, want)
	}
	return nil
}
