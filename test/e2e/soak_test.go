package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/test/kit"
	"github.com/sluice-cdc/sluice/test/workload"
)

// soakDuration is SLUICE_SOAK_DURATION (make soak), else the short soak of
// make test.
func soakDuration(t testing.TB) time.Duration {
	if v := os.Getenv("SLUICE_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SLUICE_SOAK_DURATION: %v", err)
		}
		return d
	}
	return 60 * time.Second
}

// soak runs the workload for a while against a pipeline while a chaos loop
// SIGKILLs random service processes and restarts them, restarts the
// broker (multi-process mode) and crashes Postgres once; then it restarts
// whatever is down, waits for the final LSN and runs the oracle. env adds
// SLUICE_* settings (the negative controls' unsafe switches).
func soak(t *testing.T, m mode, tune func(*kit.Chaos), env ...string) (kit.Report, kit.ChaosStats, kit.Pipeline) {
	if testing.Short() {
		t.Skip("crash soak")
	}
	d := soakDuration(t)
	ctx, cancel := context.WithTimeout(context.Background(), d+12*time.Minute)
	defer cancel()
	pg, err := kit.StartPostgres(ctx, "soak")
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	dsn := pg.C.DSN("soak")
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	o := wlOptions(uint64(time.Now().UnixNano()))
	o.Duration = d
	o.Rate = 60
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
	p, natsProc := m(t, dir, wlSource(dsn), kit.Settings{Env: append(lifecycleEnv(), env...)})
	defer func() { _ = p.Stop() }()
	if err := p.EnsureRunning(ctx); err != nil {
		t.Fatal(err)
	}
	chaos := &kit.Chaos{Pipeline: p, NATS: natsProc, Postgres: pg, Every: 6 * time.Second, Seed: o.Seed, Log: t.Logf}
	if c, ok := p.(*kit.Cluster); ok {
		chaos.Rare = []*kit.Proc{c.Catalog}
		chaos.NATSCluster = c.NATSC
	}
	if tune != nil {
		tune(chaos)
	}
	chaosCtx, stopChaos := context.WithCancel(ctx)
	chaosDone := make(chan kit.ChaosStats, 1)
	go func() { chaosDone <- chaos.Run(chaosCtx, d) }()
	st, err := g.Run(ctx, pool)
	stopChaos()
	cs := <-chaosDone
	if err != nil {
		t.Fatalf("workload: %v", err)
	}
	t.Logf("workload: %v", st)
	t.Logf("chaos: %v", cs)
	if err := p.EnsureRunning(ctx); err != nil {
		t.Fatalf("restarting after the chaos: %v", err)
	}
	rep := settle(t, ctx, p, pool, dsn, g)
	t.Logf("SOAK %s: survived %s; checked %d rows in %d destination tables; loss (missing) %d, duplicates %d, phantoms %d, wrong values %d, leaked %d",
		d, cs, rep.Rows, rep.Destinations, rep.Missing, rep.Duplicate, rep.Phantom, rep.Differ, rep.Leaked)
	return rep, cs, p
}

// lifecycleEnv runs the soak with aggressive compaction and garbage
// collection (ADR 0023): a pass of each every few seconds, a destination's
// table compacted from 4 members, snapshots expiring after a minute (the
// newest 20 kept) and collected a minute later, so compactions, GC passes
// and their crashes happen many times under the chaos.
func lifecycleEnv() []string {
	return []string{
		"SLUICE_CATALOG_COMPACT_INTERVAL=5s", "SLUICE_CATALOG_COMPACT_MIN_PACKS=4",
		"SLUICE_CATALOG_GC_INTERVAL=5s", "SLUICE_CATALOG_GC_GRACE=1m",
		"SLUICE_CATALOG_SNAPSHOT_RETENTION=1m", "SLUICE_CATALOG_SNAPSHOT_RETAIN_MIN=20",
	}
}

// TestSoakOneProcess: kill -9 of `sluice dev` at random times (embedded
// broker and catalog die with it), a Postgres crash; then the oracle.
func TestSoakOneProcess(t *testing.T) {
	rep, _, _ := soak(t, oneProcess, nil)
	report(t, rep)
}

// TestSoakMultiProcess: kill -9 of random service processes, nats-server
// restarts, one catalog-host kill, a Postgres crash; then the oracle.
// It found rule-6 defects twice (a 100 KB TOAST value read back NULL in
// about 1 of 30,000 rows): a replayed move stored twice at one position
// (services/flusher/internal/resolve TestResolveSamePositionPrefersValues)
// and a moved row's TOAST read racing its commit's visibility
// (services/reader TestTOASTFetchWaitsForVisibility).
func TestSoakMultiProcess(t *testing.T) {
	rep, _, _ := soak(t, multiProcess, nil, extraEnv()...)
	report(t, rep)
}

// TestSoakCluster: the multi-process soak on a three-node JetStream
// cluster (streams at replicas 3): kill -9 of random service processes,
// of a NATS node (the CHANGES stream leader every other time) with its
// restart, SIGSTOP/SIGCONT stalls of a node, one catalog-host kill, a
// Postgres crash; then the oracle. Only with SLUICE_SOAK_DURATION (make
// soak). One node is faulted at a time, and only while every node passes
// its full health check (kit.Chaos.nodeFault): a node just restarted
// serves before its replicas have caught up, and faulting another one then
// left a stream one current replica, no quorum, and the services that
// restarted in that window could not provision their streams. A node that
// stays unhealthy (the nats-server catch-up defect, see kit.Chaos.repair)
// is restarted, and the summary counts it.
func TestSoakCluster(t *testing.T) {
	if os.Getenv("SLUICE_SOAK_DURATION") == "" {
		t.Skip("the cluster soak runs with SLUICE_SOAK_DURATION (make soak)")
	}
	rep, cs, p := soak(t, natsCluster, func(c *kit.Chaos) { c.NATSShare = 0.3 }, extraEnv()...)
	for _, n := range p.(*kit.Cluster).NATSC.Nodes {
		if l := n.Grep("last msgid mismatch"); len(l) > 0 {
			t.Logf("FINDING (nats-server catch-up defect, docs/scaling.md): %s: %d lines, the first: %s", n.Name, len(l), l[0])
		}
	}
	t.Logf("SOAK CLUSTER faults by kind: NATS node kills %d (of the stream leader %d), NATS node stalls %d (NATS faults deferred until every node was healthy %d, restarts of a node left unhealthy %d), service kills %d, catalog kills %d, postgres crashes %d; rows checked %d: missing %d, duplicated %d, wrong %d, leaked %d",
		cs.NATSNodeKills, cs.NATSLeaderKills, cs.NATSStalls, cs.NATSDeferred, cs.NATSRepairs, serviceKills(cs), cs.Kills["catalog"], cs.PostgresRestarts, rep.Rows, rep.Missing, rep.Duplicate, rep.Differ+rep.Phantom, rep.Leaked)
	report(t, rep)
}

// serviceKills counts the kill -9s of sluice service processes.
func serviceKills(cs kit.ChaosStats) int {
	n := 0
	for name, k := range cs.Kills {
		if !strings.HasPrefix(name, "catalog") {
			n += k
		}
	}
	return n
}

// extraEnv is SLUICE_SOAK_ENV, space-separated KEY=VALUE pairs added to
// every service process (e.g. the negative controls' tuning without their
// unsafe switch, to show the tuning alone loses nothing).
func extraEnv() []string { return strings.Fields(os.Getenv("SLUICE_SOAK_ENV")) }
