package kit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgcluster"
	"github.com/sluice-cdc/sluice/shared/pgtest"
)

// Postgres is a private cluster a test may kill and restart (the shared
// pgtest cluster must not be restarted under other tests).
type Postgres struct {
	C    *pgcluster.Cluster
	root string
	opts pgcluster.Options
}

// StartPostgres starts a private cluster under a fresh directory (removed
// by a watchdog when the test binary exits) and creates database db.
func StartPostgres(ctx context.Context, db string) (*Postgres, error) {
	root, err := os.MkdirTemp("", "sluice-kit-pg-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(root, 0o777); err != nil {
		return nil, err
	}
	settings := map[string]string{}
	for k, v := range pgtest.Settings {
		settings[k] = v
	}
	settings["max_connections"] = "200"
	opts := pgcluster.Options{Dir: filepath.Join(root, "data"), Settings: settings}
	c, err := pgcluster.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := c.Watchdog(os.Getpid(), root); err != nil {
		_ = c.Kill()
		return nil, err
	}
	if err := c.CreateDatabase(ctx, db); err != nil {
		_ = c.Kill()
		return nil, err
	}
	opts.Port = c.Port()
	return &Postgres{C: c, root: root, opts: opts}, nil
}

// Crash stops the server in immediate mode (no checkpoint: crash recovery
// on start) and starts it again on the same port.
func (p *Postgres) Crash(ctx context.Context) error {
	if err := p.C.Kill(); err != nil {
		return fmt.Errorf("killing postgres: %w", err)
	}
	c, err := pgcluster.Start(ctx, p.opts)
	if err != nil {
		return fmt.Errorf("restarting postgres: %w", err)
	}
	p.C = c
	return nil
}

// Close kills the server and removes its files.
func (p *Postgres) Close() {
	_ = p.C.Kill()
	os.RemoveAll(p.root)
}

// Chaos kills and restarts things at random while a workload runs.
type Chaos struct {
	Pipeline Pipeline
	// NATS, when set, is killed and restarted now and then (a broker
	// restart). Nil in one-process mode, where the broker is in-process.
	NATS *Proc
	// NATSCluster, when set, has one node at a time killed (kill -9, the
	// CHANGES stream leader every other time) and restarted, or stalled
	// (SIGSTOP for 2-6 s, then SIGCONT): a quorum of current replicas
	// always stays up, because a node is faulted only while every node
	// passes its full health check (see nodeFault), and a node whose
	// stream replica stays broken is restarted (see repair).
	NATSCluster *NATSCluster
	// RepairAfter is how long a running, unstalled node may fail its full
	// health check before the chaos restarts it; default 45s.
	RepairAfter time.Duration
	// UnsafeNoHealthGate faults a NATS node whatever the others' health:
	// the negative control of TestChaosWaitsForHealthyCluster.
	UnsafeNoHealthGate bool
	// Postgres, when set, is crashed and restarted once, halfway.
	Postgres *Postgres
	// Extra victims killed rarely (e.g. the catalog host).
	Rare []*Proc
	// NATSShare is the share of faults that restart the broker; default 0.2.
	NATSShare float64
	// Every is the mean pause between faults; default 8s.
	Every time.Duration
	Seed  uint64
	Log   func(format string, args ...any)

	stalled   atomic.Bool         // a NATS node is stalled
	unhealthy map[*Proc]time.Time // since when a node fails its health check
}

// ChaosStats count the faults survived.
type ChaosStats struct {
	Kills           map[string]int // SIGKILLs per process name
	NATSRestarts    int
	NATSNodeKills   int // of which NATSLeaderKills killed the CHANGES leader
	NATSLeaderKills int
	NATSStalls      int
	// NATSDeferred counts NATS faults not applied because a node was down,
	// stalled or not yet healthy (still catching up).
	NATSDeferred int
	// NATSRepairs counts restarts of a node whose stream replica stayed
	// broken (the nats-server catch-up defect, docs/scaling.md).
	NATSRepairs      int
	PostgresRestarts int
	RestartFailures  []string
}

func (s ChaosStats) Total() int {
	n := s.NATSRestarts + s.PostgresRestarts + s.NATSNodeKills + s.NATSStalls
	for _, k := range s.Kills {
		n += k
	}
	return n
}

func (s ChaosStats) String() string {
	var names []string
	for k := range s.Kills {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s×%d", k, s.Kills[k]))
	}
	nodes := ""
	if s.NATSNodeKills+s.NATSStalls > 0 {
		nodes = fmt.Sprintf(", NATS node kills %d (stream leader %d), NATS node stalls %d (deferred while the cluster was not healthy %d), NATS node repairs %d",
			s.NATSNodeKills, s.NATSLeaderKills, s.NATSStalls, s.NATSDeferred, s.NATSRepairs)
	}
	return fmt.Sprintf("%d faults: kill -9 [%s], nats-server restarts %d%s, postgres crashes %d, restart failures %d",
		s.Total(), strings.Join(parts, " "), s.NATSRestarts, nodes, s.PostgresRestarts, len(s.RestartFailures))
}

// Run injects faults until ctx ends, then leaves everything running.
func (c *Chaos) Run(ctx context.Context, d time.Duration) ChaosStats {
	if c.Every == 0 {
		c.Every = 8 * time.Second
	}
	if c.NATSShare == 0 {
		c.NATSShare = 0.2
	}
	if c.Log == nil {
		c.Log = func(string, ...any) {}
	}
	if c.RepairAfter == 0 {
		c.RepairAfter = 45 * time.Second
	}
	c.unhealthy = map[*Proc]time.Time{}
	r := rand.New(rand.NewPCG(c.Seed, 99))
	st := ChaosStats{Kills: map[string]int{}}
	start := time.Now()
	pgDone := c.Postgres == nil
	rareDone := len(c.Rare) == 0
	var wg sync.WaitGroup
	var mu sync.Mutex // guards st.RestartFailures
	c.stalled.Store(false)
	defer wg.Wait()
	restart := func(p *Proc) {
		// Restart in the background: the next fault may hit while a
		// process is still starting, as in production.
		wg.Add(1)
		delay := time.Duration(r.IntN(1500)) * time.Millisecond
		go func() {
			defer wg.Done()
			time.Sleep(delay)
			for attempt := 0; ; attempt++ {
				if p.Running() {
					return
				}
				err := p.Start(context.Background())
				if err == nil {
					return
				}
				if errors.Is(err, ErrExited) {
					p.mu.Lock()
					p.startFailures = append(p.startFailures, err.Error())
					p.mu.Unlock()
				}
				if attempt >= 5 {
					c.Log("chaos: %s did not restart: %v", p.Name, err)
					mu.Lock()
					st.RestartFailures = append(st.RestartFailures, p.Name)
					mu.Unlock()
					return
				}
				time.Sleep(time.Second)
			}
		}()
	}
	for {
		pause := time.Duration(float64(c.Every) * (0.3 + 1.4*r.Float64()))
		select {
		case <-ctx.Done():
			wg.Wait()
			return st
		case <-time.After(pause):
		}
		elapsed := time.Since(start)
		if c.NATSCluster != nil {
			c.repair(&st, restart)
		}
		switch {
		case !pgDone && elapsed > d/2:
			pgDone = true
			c.Log("chaos: crashing postgres")
			if err := c.Postgres.Crash(context.Background()); err != nil {
				c.Log("chaos: %v", err)
				st.RestartFailures = append(st.RestartFailures, "postgres")
			}
			st.PostgresRestarts++
		case !rareDone && elapsed > d/3:
			rareDone = true
			p := c.Rare[r.IntN(len(c.Rare))]
			c.Log("chaos: kill -9 %s", p.Name)
			p.Kill()
			st.Kills[p.Name]++
			restart(p)
		case c.NATSCluster != nil && r.Float64() < c.NATSShare:
			if !c.nodeFault(r, &st, &wg, restart) {
				continue
			}
		case c.NATS != nil && c.NATS.Running() && r.Float64() < c.NATSShare:
			c.Log("chaos: restarting nats-server (kill -9)")
			c.NATS.Kill()
			st.NATSRestarts++
			restart(c.NATS)
		default:
			var alive []*Proc
			for _, p := range c.Pipeline.Services() {
				if p.Running() {
					alive = append(alive, p)
				}
			}
			if len(alive) == 0 {
				continue
			}
			p := alive[r.IntN(len(alive))]
			c.Log("chaos: kill -9 %s", p.Name)
			p.Kill()
			st.Kills[p.Name]++
			restart(p)
		}
	}
}

// nodeFault kills or stalls one node of the NATS cluster when every node
// runs, none is stalled and every node passes its full health check (every
// stream and consumer replica current); it reports whether it did. A node
// just restarted is serving before its replicas have caught up: killing
// another node then leaves a stream one current replica, no quorum, and
// the services that start in that window cannot provision their streams.
func (c *Chaos) nodeFault(r *rand.Rand, st *ChaosStats, wg *sync.WaitGroup, restart func(*Proc)) bool {
	if !c.UnsafeNoHealthGate {
		if why := c.NATSCluster.notHealthy(context.Background(), c.stalled.Load()); why != "" {
			c.Log("chaos: NATS fault deferred: %s", why)
			st.NATSDeferred++
			return false
		}
	}
	if r.IntN(3) == 0 {
		n := c.NATSCluster.Nodes[r.IntN(len(c.NATSCluster.Nodes))]
		d := time.Duration(2000+r.IntN(4000)) * time.Millisecond
		c.Log("chaos: stalling %s (SIGSTOP) for %s", n.Name, d)
		_ = n.Signal(syscall.SIGSTOP)
		c.stalled.Store(true)
		st.NATSStalls++
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(d) // the stall's length
			_ = n.Signal(syscall.SIGCONT)
			c.stalled.Store(false)
		}()
		return true
	}
	n := c.NATSCluster.Nodes[r.IntN(len(c.NATSCluster.Nodes))]
	if st.NATSNodeKills%2 == 0 {
		if l, err := c.NATSCluster.Leader(context.Background(), "CHANGES"); err == nil {
			n = l
			st.NATSLeaderKills++
		}
	}
	c.Log("chaos: kill -9 of NATS node %s", n.Name)
	n.Kill()
	st.NATSNodeKills++
	restart(n)
	return true
}

// repair restarts a node that has failed its full health check for
// RepairAfter while running and not stalled (TestChaosRepairsUnhealthyNode).
// nats-server v2.15.3 can leave a restarted node's stream replica broken:
// its catch-up (processCatchupMsg) stores messages without updating the
// stream's last message id, the reader's next chained publish
// (Nats-Expected-Last-Msg-Id) then fails on that replica only, and it stops
// applying ("critical write error: last msgid mismatch") until its server
// restarts and rebuilds the id from its store. Restarting the node is the
// operator's remedy (docs/scaling.md); the chaos applies it so that the
// next fault meets three current replicas.
func (c *Chaos) repair(st *ChaosStats, restart func(*Proc)) {
	if c.unhealthy == nil {
		c.unhealthy = map[*Proc]time.Time{}
	}
	if c.stalled.Load() {
		clear(c.unhealthy) // a stall makes the other nodes unhealthy too: start over after it
		return
	}
	for i, n := range c.NATSCluster.Nodes {
		if !n.Running() {
			delete(c.unhealthy, n)
			continue
		}
		h := c.NATSCluster.Health(context.Background(), i)
		if h == "" {
			delete(c.unhealthy, n)
			continue
		}
		since, ok := c.unhealthy[n]
		if !ok {
			c.unhealthy[n] = time.Now()
			continue
		}
		if time.Since(since) < c.RepairAfter {
			continue
		}
		delete(c.unhealthy, n)
		c.Log("chaos: %s has failed its health check for %s (%s): restarting it", n.Name, time.Since(since).Round(time.Second), h)
		_ = n.Signal(syscall.SIGCONT) // a stopped process cannot handle SIGTERM
		if err := n.Stop(30 * time.Second); err != nil {
			c.Log("chaos: stopping %s: %v", n.Name, err)
		}
		st.NATSRepairs++
		restart(n)
		return // one at a time
	}
}
