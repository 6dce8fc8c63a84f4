package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
	"github.com/sluice-cdc/sluice/test/workload"
)

// natsCluster is the multi-process pipeline on a three-node JetStream
// cluster, every stream at replicas 3.
func natsCluster(t testing.TB, dir string, src kit.Source, s kit.Settings) (kit.Pipeline, *kit.Proc) {
	s.NATSNodes = 3
	c, err := kit.NewCluster(dir, src, s, kit.DefaultCounts)
	if err != nil {
		t.Fatal(err)
	}
	return c, nil
}

// TestOracleCluster: the workload against the multi-process pipeline (2
// readers, 2 routers, 3 flushers, 2 indexers, 2 publishers) on a
// three-node JetStream cluster (streams at replicas 3), in three phases:
//  1. traffic while the CHANGES stream leader is killed (kill -9) and
//     restarted and another node is stalled (SIGSTOP, SIGCONT); then each
//     replica's share of the work (spread_test.go);
//  2. traffic while one router, flusher and indexer, the active reader and
//     the lease-holding publisher are killed: the standbys' takeover
//     times, the survivors' shares;
//
// then the oracle over every destination; and
//  3. two of the three nodes killed: status, metrics and logs must say
//     that JetStream has no quorum; then the nodes come back and every
//     stream answers again.
//
// FINDINGS (nats-server v2.15.3; docs/scaling.md): every replica checks
// Nats-Expected-Last-Msg-Id (the reader's publish chain) when it applies
// an entry, and a mismatch is a critical write error there: one chained
// publish naming a stale id wedges CHANGES on every node (test/kit
// TestNATSLastMsgIDMismatchWedgesStream); and a replica that caught up
// from a snapshot may keep a stale last id (processCatchupMsg), failing
// the next chained publish on its own. The test logs what it meets
// (FINDING lines) and restarts a node left broken after phase 1's kill.
func TestOracleCluster(t *testing.T) {
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
	o := wlOptions(19)
	o.Tenants, o.InitialRows, o.LargeEvery = 16, 600, -1
	o.ManyTenants = 1000 // the 10,000-tenant share is the oracle and soak tests'
	o.Rate = 50
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
	const partitions = 24
	// Shorter leases than the defaults: the takeover phase waits for them.
	// Each still spans three renewals (every TTL/3) on a loaded machine.
	l := leases{reader: 6 * time.Second, publisher: 5 * time.Second, delivery: 9 * time.Second}
	p, _ := natsCluster(t, dir, wlSource(dsn), kit.Settings{Partitions: partitions, Env: l.env()})
	c := p.(*kit.Cluster)
	defer func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	}()
	phase := phases(t)
	if err := p.EnsureRunning(ctx); err != nil {
		t.Fatal(err)
	}
	phase("start-up")
	waitThrough(t, ctx, c, pool, 4*time.Minute) // the backfill
	phase("backfill")
	traffic := func(d time.Duration) <-chan error {
		done := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			st, err := g.Run(wctx, pool)
			t.Logf("workload: %v", st)
			done <- err
		}()
		return done
	}

	// Phase 1.
	before := scrapeAll(t, ctx, c)
	done := traffic(18 * time.Second)
	natsFaults(t, ctx, c)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	waitThrough(t, ctx, c, pool, 2*time.Minute)
	checkShares(t, "with NATS faults", before, scrapeAll(t, ctx, c))
	phase("1: NATS faults")

	// Phase 2.
	takeover(t, ctx, c, pool, partitions, l, traffic)
	phase("2: service kills and takeover")

	rep := settle(t, ctx, p, pool, dsn, g)
	report(t, rep)
	phase("oracle")
	for i, n := range c.NATSC.Nodes {
		if h := c.NATSC.Health(ctx, i); h != "" {
			t.Logf("FINDING (nats-server): %s is not healthy: %s", n.Name, h)
		}
	}

	// Phase 3, last: with the stream replica a restart leaves broken (see the
	// FINDING above), JetStream after a quorum loss may not serve the
	// router again; the phase checks what the processes say.
	noQuorum(t, ctx, c, pool)
	phase("3: quorum loss and recovery")
}

// phases logs how long each phase of a test took (PHASE lines), for the
// test's budget in make test.
func phases(t *testing.T) func(name string) {
	start, last := time.Now(), time.Now()
	return func(name string) {
		t.Logf("PHASE %s: %s (%s since the pipeline started)", name, time.Since(last).Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
		last = time.Now()
	}
}

// natsFaults kills the CHANGES stream leader with kill -9, waits for a new
// leader, restarts the node, waits until every node passes its full health
// check (the restarted node's replicas caught up: stalling another node
// before that would leave the streams one current replica, no quorum, and
// this phase is not the quorum-loss one), then stalls another node for 4 s.
func natsFaults(t *testing.T, ctx context.Context, c *kit.Cluster) {
	t.Helper()
	leader, err := c.NATSC.WaitLeader(ctx, proto.StreamChanges, nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	leader.Kill()
	next, err := c.NATSC.WaitLeader(ctx, proto.StreamChanges, leader, 30*time.Second)
	if err != nil {
		t.Fatalf("after kill -9 of the leader %s: %v\n%s", leader.Name, err, c.Tail())
	}
	t.Logf("NATS fault: kill -9 of %s (leader of %s); %s leads %s later", leader.Name, proto.StreamChanges, next.Name, time.Since(killed).Round(10*time.Millisecond))
	if err := leader.Start(ctx); err != nil {
		t.Fatalf("restarting %s: %v", leader.Name, err)
	}
	t.Logf("NATS fault: %s restarted (serving, current with the meta leader) %s after its kill", leader.Name, time.Since(killed).Round(10*time.Millisecond))
	if err := c.NATSC.WaitHealthy(ctx, 45*time.Second); err != nil {
		// The nats-server catch-up defect (docs/scaling.md) leaves the
		// restarted node's replica broken until its next restart: the
		// operator's remedy, applied here as the soak's chaos applies it.
		if l := leader.Grep("last msgid mismatch"); len(l) > 0 {
			t.Logf("FINDING (nats-server catch-up defect): %s: %s; restarting it", leader.Name, l[0])
			if err := leader.Stop(30 * time.Second); err != nil {
				t.Logf("stopping %s: %v", leader.Name, err)
			}
			if err := leader.Start(ctx); err != nil {
				t.Fatalf("restarting %s: %v", leader.Name, err)
			}
			err = c.NATSC.WaitHealthy(ctx, 45*time.Second)
		}
		if err != nil {
			t.Fatalf("after the restart of %s: %v", leader.Name, err)
		}
	}
	t.Logf("NATS fault: every node healthy (every stream and consumer replica current) %s after the kill", time.Since(killed).Round(10*time.Millisecond))
	var stalled *kit.Proc
	for _, n := range c.NATSC.Nodes {
		if n != next && n != leader {
			stalled = n
		}
	}
	if err := stalled.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // the stall's length, not a synchronization
	if err := stalled.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("NATS fault: %s stalled (SIGSTOP) for 4s, then resumed", stalled.Name)
}

// noQuorum kills two of the three nodes and checks that a publisher's
// status (every stream's error), a router's metrics
// (sluice_nats_stream_available 0) and its log say that JetStream is
// unavailable for want of a quorum; then it restarts them, waits for the
// metric to return to 1 and reports whether the pipeline publishes again.
func noQuorum(t *testing.T, ctx context.Context, c *kit.Cluster, pool *pgxpool.Pool) {
	t.Helper()
	down := c.NATSC.Nodes[1:]
	for _, n := range down {
		n.Kill()
	}
	lost := time.Now()
	pub, router := running(c, "publisher-"), running(c, "router-")
	const bound = 90 * time.Second // a health check every 5 s, each stream read waits up to 3 s; a loaded machine
	var said string
	took := waitFor(t, "the status names the lost quorum", bound, func() bool {
		st, err := kit.Status(ctx, pub)
		if err != nil {
			t.Logf("status of %s: %v", pub.Name, err)
			return false
		}
		streams, _ := st["streams"].([]any)
		for _, s := range streams {
			m, _ := s.(map[string]any)
			if e, _ := m["error"].(string); m["name"] == proto.StreamChanges && strings.Contains(e, "no quorum") {
				said = e
				return true
			}
		}
		t.Logf("status of %s does not name it yet: streams %v", pub.Name, streams)
		return false
	})
	t.Logf("NO QUORUM status (%s after the kills) of %s: CHANGES: %s", took.Round(10*time.Millisecond), pub.Name, said)
	waitFor(t, "sluice_nats_stream_available{stream=CHANGES} is 0", bound, func() bool {
		return gauge(ctx, router, "sluice_nats_stream_available", `stream="CHANGES"`) == 0
	})
	waitFor(t, "the router logs the lost quorum", bound, func() bool { return len(router.Grep("JetStream stream unavailable")) > 0 })
	t.Logf("NO QUORUM metric and log of %s (%s after the kills): %s", router.Name, time.Since(lost).Round(10*time.Millisecond), router.Grep("JetStream stream unavailable")[0])
	if err := c.NATSC.Start(ctx); err != nil {
		t.Fatalf("restarting the nodes: %v", err)
	}
	// With the nats-server defect (FINDING above) a restarted node's
	// CHANGES replica may never become current again: then the metric
	// rightly stays 0, and the test reports it instead of failing on it.
	back := time.Now()
	for gauge(ctx, router, "sluice_nats_stream_available") != float64(len(natsStreams)) {
		if time.Since(back) > 2*time.Minute {
			health := ""
			for i, n := range c.NATSC.Nodes {
				health += n.Name + ": " + c.NATSC.Health(ctx, i) + "; "
			}
			t.Logf("FINDING (nats-server): a stream still has no quorum of current replicas 2 minutes after the restart: %s", health)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("NO QUORUM: every stream answers again %s after the restart", time.Since(back).Round(10*time.Millisecond))
	lsn, err := currentLSN(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if took, err := kit.Wait(ctx, c.Server(), lsn, time.Minute); err != nil {
		var health []string
		for i, n := range c.NATSC.Nodes {
			health = append(health, n.Name+": "+c.NATSC.Health(ctx, i))
		}
		t.Logf("FINDING (nats-server): after the quorum came back the pipeline did not publish %s within a minute: %v; nodes: %s", lsn, err, strings.Join(health, "; "))
	} else {
		t.Logf("NO QUORUM: the pipeline publishes again (%s in %s)", lsn, took.Round(10*time.Millisecond))
	}
}

// natsStreams are the streams sluice_nats_stream_available covers.
var natsStreams = []string{proto.StreamChanges, proto.StreamRouted, proto.StreamPacks, proto.StreamDLQ, proto.StreamReplay}

// running is the first running service process whose name starts with prefix.
func running(c *kit.Cluster, prefix string) *kit.Proc {
	for _, p := range c.Procs {
		if strings.HasPrefix(p.Name, prefix) && p.Running() {
			return p
		}
	}
	return nil
}
