package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
	"github.com/sluice-cdc/sluice/test/workload"
)

// mode builds a pipeline over src in dir.
type mode func(t testing.TB, dir string, src kit.Source, s kit.Settings) (kit.Pipeline, *kit.Proc)

func oneProcess(t testing.TB, dir string, src kit.Source, s kit.Settings) (kit.Pipeline, *kit.Proc) {
	d, err := kit.NewDev(dir, src, s)
	if err != nil {
		t.Fatal(err)
	}
	return d, nil
}

func multiProcess(t testing.TB, dir string, src kit.Source, s kit.Settings) (kit.Pipeline, *kit.Proc) {
	c, err := kit.NewCluster(dir, src, s, kit.DefaultCounts)
	if err != nil {
		t.Fatal(err)
	}
	return c, c.NATS
}

func wlSource(dsn string) kit.Source {
	return kit.Source{DSN: dsn, Tables: workload.TableNames(), RoutingColumns: workload.RoutingColumns()}
}

// wlTables are the workload's tables for the oracle. wl_events, whose rows
// spread over 10,000 tenants, is sampled (kit.Sample): every tenant the
// workload's Run changed plus eventsSample others (SLUICE_E2E_SAMPLE
// overrides the count; "all" reads every tenant).
func wlTables(t testing.TB, g *workload.Generator) []kit.Table {
	var out []kit.Table
	for _, ts := range workload.Tables() {
		kt := kit.Table{Name: ts.Name, Keys: ts.Keys, Routing: ts.Routing}
		if ts.Name == workload.Events {
			kt.Tenants = g.ManyTenants()
			kt.Sample = &kit.Sample{Always: g.Touched(workload.Events), N: eventsSample(t), Seed: g.Options().Seed}
			if kt.Sample.N < 0 {
				kt.Sample = nil
			}
		}
		out = append(out, kt)
	}
	return out
}

// eventsSample is SLUICE_E2E_SAMPLE (-1 for "all"), else 20: a read
// costs about 0.5 s of the server on this loaded 2-core machine.
func eventsSample(t testing.TB) int {
	switch v := os.Getenv("SLUICE_E2E_SAMPLE"); v {
	case "":
		return 20
	case "all":
		return -1
	default:
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("SLUICE_E2E_SAMPLE=%q: want a count or \"all\"", v)
		}
		return n
	}
}

// wlOptions are the workload of the oracle tests: 30 tenants in the
// skewed tables, 10,000 in wl_events; 30% of the wl_docs and wl_events
// moves leave the TOASTed value unchanged (SLUICE_E2E_MOVE_TOAST
// overrides).
func wlOptions(seed uint64) workload.Options {
	o := workload.Options{Seed: seed, Tenants: 30, ManyTenants: 10000, EventsWeight: 1, Workers: 4, InitialRows: 1200, LargeEvery: 300, LargeRows: 12000,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	o.Mix = workload.DefaultMix
	o.Mix.MoveToast = 30
	if v, err := strconv.Atoi(os.Getenv("SLUICE_E2E_MOVE_TOAST")); err == nil {
		o.Mix.MoveToast = v
	}
	return o
}

func currentLSN(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var lsn string
	err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	return lsn, err
}

// settle waits for the pipeline to publish the source's current LSN and
// runs the oracle over every table and every tenant the workload used
// (wl_events: sampled, see wlTables).
func settle(t testing.TB, ctx context.Context, p kit.Pipeline, pool *pgxpool.Pool, dsn string, g *workload.Generator) kit.Report {
	t.Helper()
	lsn, err := currentLSN(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	took, err := kit.Wait(ctx, p.Server(), lsn, 4*time.Minute)
	if err != nil {
		t.Fatalf("waiting for %s: %v\n%s", lsn, err, p.Tail())
	}
	t.Logf("snapshot through %s after %s; the run changed %d of wl_events' %d tenants", lsn, took.Round(time.Millisecond),
		len(g.Touched(workload.Events)), len(g.ManyTenants()))
	rep, err := kit.Check(ctx, dsn, p.Server(), kit.CheckOptions{Tables: wlTables(t, g), Tenants: g.Tenants()})
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, p.Tail())
	}
	return rep
}

func report(t testing.TB, rep kit.Report) {
	t.Helper()
	t.Log(rep)
	if !rep.OK() {
		t.Errorf("the destinations differ from the source: %s\nexamples by category:\n%s\nfirst differences:\n  %s", rep, rep.Explain(), strings.Join(rep.Diffs, "\n  "))
	}
}

// runOracle: populate (backfill), start the pipeline, run the workload
// live, wait for the final LSN, check every destination.
func runOracle(t *testing.T, m mode) {
	if testing.Short() {
		t.Skip("end to end")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dsn := pgtest.NewDB(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	o := wlOptions(42)
	o.Transactions = 1500
	g, err := workload.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := workload.Schema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := g.Populate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Cleanup(func() { artifacts(t, dir) })
	p, _ := m(t, dir, wlSource(dsn), kit.Settings{})
	defer func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	}()
	if err := p.EnsureRunning(ctx); err != nil {
		t.Fatal(err)
	}
	// The snapshot that holds the backfill: the oracle must find it stale
	// once the workload ran (the oracle's own negative control).
	lsn, err := currentLSN(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kit.Wait(ctx, p.Server(), lsn, 4*time.Minute); err != nil {
		t.Fatalf("waiting for the backfill: %v\n%s", err, p.Tail())
	}
	early, _, err := kit.Latest(ctx, p.Server())
	if err != nil {
		t.Fatal(err)
	}
	st, err := g.Run(ctx, pool)
	if err != nil {
		t.Fatalf("workload: %v", err)
	}
	t.Logf("workload: %v", st)
	rep := settle(t, ctx, p, pool, dsn, g)
	report(t, rep)
	logStreamed(t, ctx, p)
	stale, err := kit.Check(ctx, dsn, p.Server(), kit.CheckOptions{Tables: wlTables(t, g)[:1], Tenants: g.Tenants(), Snapshot: early})
	if err != nil {
		t.Fatal(err)
	}
	if stale.OK() || stale.Missing == 0 || stale.Phantom == 0 || stale.Differ == 0 {
		t.Errorf("the oracle does not see that snapshot %d (before the workload) is stale: %s", early, stale)
	} else {
		t.Logf("oracle negative control: the pre-workload snapshot %d differs as expected: %s", early, stale)
	}
}

// logStreamed logs the transactions the reader received streamed (protocol
// 2): with SLUICE_PG_SETTINGS=logical_decoding_work_mem=64kB the
// workload's larger transactions stream.
func logStreamed(t *testing.T, ctx context.Context, p kit.Pipeline) {
	var ev []string
	for _, proc := range p.Services() {
		s, err := kit.Scrape(ctx, proc)
		if err != nil {
			continue // a service without the reader, or stopped
		}
		for k, v := range s {
			if strings.HasPrefix(k, "sluice_reader_streamed_transactions_total") {
				ev = append(ev, fmt.Sprintf("%s %s=%v", proc.Name, k, v))
			}
		}
	}
	sort.Strings(ev)
	t.Logf("streamed transactions: %v", ev)
}

// TestOracleOneProcess: the workload against `sluice dev`.
func TestOracleOneProcess(t *testing.T) { runOracle(t, oneProcess) }

// TestOracleMultiProcess: the workload against separate processes: a real
// nats-server, the catalog host, 2 readers (one standby), 2 routers, 3
// flushers, 2 indexers, 2 publishers.
func TestOracleMultiProcess(t *testing.T) { runOracle(t, multiProcess) }

var _ = fmt.Sprint
