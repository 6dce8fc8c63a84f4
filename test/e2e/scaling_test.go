package e2e

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
	"github.com/sluice-cdc/sluice/test/workload"
)

// TestScalingCosts measures what docs/scaling.md scales up: the workload
// as fast as it goes (SLUICE_SCALING_TX transactions, default 4000, over
// SLUICE_SCALING_TENANTS tenants, default 100) through the multi-process
// pipeline on one nats-server, then each service's CPU per unit of work
// from the processes' own metrics, and the rows per second from commit
// to published snapshot. Not in make test (SLUICE_SCALING=1 runs it).
func TestScalingCosts(t *testing.T) {
	if os.Getenv("SLUICE_SCALING") == "" {
		t.Skip("a measurement: SLUICE_SCALING=1 runs it")
	}
	env := func(k string, d int) int {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
			return v
		}
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dsn := pgtest.NewDB(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	o := wlOptions(5)
	o.Tenants, o.InitialRows, o.LargeEvery, o.Transactions = env("SLUICE_SCALING_TENANTS", 100), 2000, -1, env("SLUICE_SCALING_TX", 4000)
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
	p, _ := multiProcess(t, dir, wlSource(dsn), kit.Settings{Partitions: 16})
	c := p.(*kit.Cluster)
	defer func() { _ = p.Stop() }()
	if err := p.EnsureRunning(ctx); err != nil {
		t.Fatal(err)
	}
	waitThrough(t, ctx, c, pool, 4*time.Minute)
	before := scrapeAll(t, ctx, c)
	start := time.Now()
	st, err := g.Run(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	waitThrough(t, ctx, c, pool, 10*time.Minute)
	elapsed := time.Since(start)
	t.Logf("workload: %v", st)
	t.Logf("SCALING: %d rows in %s commit to published snapshot: %.0f rows/s; %d tenants, %d destinations",
		st.Rows, elapsed.Round(time.Millisecond), float64(st.Rows)/elapsed.Seconds(), o.Tenants, 4*o.Tenants)
	after := scrapeAll(t, ctx, c)
	costs(t, "full speed", before, after)
	checkShares(t, "full speed", before, after)
}
