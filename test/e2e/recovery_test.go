package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

// recoveryBudget is the bound on catching up after a kill -9 and
// an immediate restart of `sluice dev` with 1,000 tenants under load.
const recoveryBudget = 30 * time.Second

// TestRecoveryAfterKill: `sluice dev` with 1,000 tenants under a steady
// load (100 rows every 100 ms: every tenant written every second, a load
// the pipeline keeps up with, checked before the kill, so the figure is
// recovery and not a backlog) is killed with SIGKILL and restarted at once; `sluice wait` on the source's LSN at the
// restart must return within recoveryBudget of the kill. What bounds that
// time (the leases a dead process leaves, AckWait of what it had in
// flight, the settle waits of a takeover) is in ARCHITECTURE.md, "Recovery
// after a crash". The oracle then checks every tenant: a fast recovery that
// lost or duplicated rows is no recovery. It asserts a time, so it runs
// in make bench, not make test (SLUICE_E2E_RECOVERY=1; ~1 min on a quiet
// machine, 4 min at load 35, most of it the oracle's 1,000 reads).
func TestRecoveryAfterKill(t *testing.T) {
	if testing.Short() || os.Getenv("SLUICE_E2E_RECOVERY") == "" {
		t.Skip("a timed recovery: make bench runs it (SLUICE_E2E_RECOVERY=1)")
	}
	const tenants = 1000
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.rec_events (tenant_id text NOT NULL, id bigint NOT NULL, v bigint NOT NULL,
		PRIMARY KEY (tenant_id, id))`)
	s := newSluice(t, src.dsn, []string{"public.rec_events"})
	defer artifacts(t, s.dev.Dir)
	s.start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("pipeline never live: %v\n%s", err, s.tail())
	}

	pool, err := pgxpool.New(ctx, src.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var next atomic.Int64
	var loadErr atomic.Value
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopLoad:
				return
			case <-tick.C:
			}
			lo := next.Add(100) - 100
			if _, err := pool.Exec(ctx, `INSERT INTO public.rec_events SELECT 't' || (g % $3), g, g * 3
				FROM generate_series($1::bigint, $2::bigint) g`, lo, lo+99, tenants); err != nil {
				loadErr.Store(err)
				return
			}
		}
	}()
	// Under load for ten flush intervals before the kill: every tenant has
	// rows flushed, buffered and in flight. (The load's length, not a wait
	// for the pipeline.)
	select {
	case <-time.After(10 * time.Second):
	case <-loadDone:
	}

	// The steady lag under this load, before the kill: a commit made now
	// becomes visible while the load goes on. A pipeline that lags by more
	// than the budget cannot recover within it; the figure says which the
	// test measured.
	lag, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute)
	if err != nil {
		t.Fatalf("the pipeline does not keep up with the load before the kill: %v\n%s", err, s.tail())
	}

	killedAt := time.Now()
	s.dev.P.Kill()
	s.start()
	restarted := time.Since(killedAt)
	target := src.lsn()
	close(stopLoad)
	<-loadDone
	if err, _ := loadErr.Load().(error); err != nil {
		t.Fatalf("load: %v", err)
	}
	waited, err := kit.Wait(ctx, s.server, target, 3*time.Minute)
	total := time.Since(killedAt)
	t.Logf("%d rows loaded; lag before the kill %s; kill -9 to ready %s, then sluice wait %s: caught up %s after the kill (budget %s)",
		next.Load(), lag.Round(time.Millisecond), restarted.Round(time.Millisecond), waited.Round(time.Millisecond), total.Round(time.Millisecond), recoveryBudget)
	if os.Getenv("SLUICE_RECOVERY_REPORT") != "" {
		fmt.Fprintf(os.Stderr, "recovery: %s (lag before %s, ready %s, wait %s)\n", total.Round(time.Millisecond), lag.Round(time.Millisecond), restarted.Round(time.Millisecond), waited.Round(time.Millisecond))
	}
	if err != nil {
		t.Fatalf("not caught up %s after the kill: %v\n%s", total.Round(time.Second), err, s.tail())
	}
	if total > recoveryBudget {
		t.Errorf("caught up %s after the kill, over the %s budget\n%s", total.Round(time.Second), recoveryBudget, grepSlow(s))
	}
	if rows, diffs := oracle(t, src, s, "public.rec_events", []string{"tenant_id", "id"}); len(diffs) > 0 {
		t.Fatalf("after the restart, %d rows checked, %d differences:\n%s", rows, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
}

// grepSlow is what the restarted process logged about leases, takeovers and
// redeliveries (what recovery waited on).
func grepSlow(s *sluice) string {
	var b strings.Builder
	for _, w := range []string{"lease", "takeover", "settle", "claim", "redeliver"} {
		for _, l := range s.dev.P.Grep(w) {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	out := b.String()
	if len(out) > 6000 {
		out = out[len(out)-6000:]
	}
	return out
}
