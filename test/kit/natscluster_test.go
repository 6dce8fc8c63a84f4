package kit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startNATSCluster starts a three-node cluster under a test directory and
// creates stream T (t.>) at replicas 3 on it.
func startNATSCluster(t *testing.T, ctx context.Context) (*NATSCluster, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs nats-server")
	}
	c, err := NewNATSCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(10 * time.Second) })
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage,
		Replicas: 3, Duplicates: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	return c, js, s
}

// TestChaosWaitsForHealthyCluster: the chaos faults a NATS node only while
// every node passes its full health check; with a node that does not (here
// stopped behind the chaos's back, as a node still catching up after a
// restart would be) it defers the fault. The negative control
// (UnsafeNoHealthGate) faults anyway: a second node down or stalled, the
// cluster's streams left without a quorum of current replicas.
func TestChaosWaitsForHealthyCluster(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		t.Run(fmt.Sprintf("unsafe=%v", unsafe), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			c, _, _ := startNATSCluster(t, ctx)
			sick := c.Nodes[2]
			if err := sick.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			defer sick.Signal(syscall.SIGCONT)
			// The premise: the stopped node fails its health check (polled:
			// the stop lands asynchronously).
			for polls := 1; c.Health(ctx, 2) == ""; polls++ {
				if polls == 20 {
					t.Fatalf("%s still passes its health check after SIGSTOP", sick.Name)
				}
				time.Sleep(100 * time.Millisecond)
			}
			ch := &Chaos{NATSCluster: c, UnsafeNoHealthGate: unsafe, Log: t.Logf}
			st := ChaosStats{Kills: map[string]int{}}
			var wg sync.WaitGroup
			var restarted []*Proc
			did := ch.nodeFault(rand.New(rand.NewPCG(1, 2)), &st, &wg, func(p *Proc) { restarted = append(restarted, p) })
			for _, n := range c.Nodes {
				_ = n.Signal(syscall.SIGCONT) // a stall the fault began, ended at once
			}
			wg.Wait()
			faulted := st.NATSNodeKills + st.NATSStalls
			if unsafe {
				if !did || faulted != 1 {
					t.Fatalf("the negative control faulted nothing (did %v, %+v): the test cannot tell the gate works", did, st)
				}
				t.Logf("negative control: with %s not healthy the chaos still faulted a node (%+v)", sick.Name, st)
				return
			}
			if did || faulted != 0 || len(restarted) != 0 {
				t.Fatalf("a node was faulted while %s was not healthy: did %v, %+v", sick.Name, did, st)
			}
			if st.NATSDeferred != 1 {
				t.Errorf("deferred faults: %d, want 1", st.NATSDeferred)
			}
			for _, n := range c.Nodes {
				if n.Kills() != 0 {
					t.Errorf("%s was killed", n.Name)
				}
			}
		})
	}
}

// TestChaosRepairsUnhealthyNode: a node that runs, is not stalled by the
// chaos and fails its full health check for RepairAfter is restarted (the
// remedy for a stream replica nats-server left broken, Chaos.repair), once,
// and is healthy again after it; a node that has just turned unhealthy is
// left alone.
func TestChaosRepairsUnhealthyNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, _, _ := startNATSCluster(t, ctx)
	sick := c.Nodes[1]
	if err := sick.Signal(syscall.SIGSTOP); err != nil { // a node that answers nothing: unhealthy
		t.Fatal(err)
	}
	defer sick.Signal(syscall.SIGCONT)
	ch := &Chaos{NATSCluster: c, RepairAfter: time.Second, Log: t.Logf}
	st := ChaosStats{Kills: map[string]int{}}
	var restarted []*Proc
	restart := func(p *Proc) {
		restarted = append(restarted, p)
		if err := p.Start(ctx); err != nil {
			t.Errorf("restarting %s: %v", p.Name, err)
		}
	}
	ch.repair(&st, restart)
	if st.NATSRepairs != 0 || len(restarted) != 0 {
		t.Fatalf("a node just found unhealthy was restarted: %+v", st)
	}
	time.Sleep(1500 * time.Millisecond)
	ch.repair(&st, restart)
	if st.NATSRepairs != 1 || len(restarted) != 1 || restarted[0] != sick {
		t.Fatalf("after RepairAfter: repairs %d, restarted %v; want %s once", st.NATSRepairs, restarted, sick.Name)
	}
	if err := c.WaitHealthy(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	ch.repair(&st, restart)
	if st.NATSRepairs != 1 {
		t.Errorf("a healthy cluster was repaired again: %+v", st)
	}
}

func replicas(info *jetstream.StreamInfo) string {
	if info.Cluster == nil {
		return "none"
	}
	parts := []string{info.Cluster.Leader + " (leader)"}
	for _, r := range info.Cluster.Replicas {
		parts = append(parts, fmt.Sprintf("%s current=%v lag=%d", r.Name, r.Current, r.Lag))
	}
	return strings.Join(parts, ", ")
}

// TestNATSLastMsgIDMismatchWedgesStream reproduces the nats-server
// (v2.15.3) defect that stopped the cluster soak's CHANGES stream: on a
// replicated stream the Nats-Expected-Last-Msg-Id check runs when each
// replica applies the entry, not before the leader proposes it (as the
// expected-last-sequence check does), and its failure is a "critical write
// error" there. One publish naming a stale last id, a rejection a single
// server answers with an error and nothing else, stops every replica from
// applying the stream; restarting a node replays the same entry and fails
// again. The reader's chain breaks that way whenever a chained publish is
// lost in a leader change while the next one reaches the new leader. The
// test fails once nats-server rejects the publish without wedging the
// stream (then the cluster soak can chain on the last id again).
func TestNATSLastMsgIDMismatchWedgesStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, js, s := startNATSCluster(t, ctx)
	if _, err := js.Publish(ctx, "t.a", []byte("1"), jetstream.WithMsgID("m1")); err != nil {
		t.Fatal(err)
	}
	_, err := js.Publish(ctx, "t.a", []byte("2"), jetstream.WithMsgID("m2"), jetstream.WithExpectLastMsgID("not-m1"))
	t.Logf("publish naming a stale last id: %v", err)
	if err := c.WaitHealthy(ctx, 10*time.Second); err == nil {
		t.Fatalf("the stream stayed healthy after a last-msg-id mismatch: nats-server no longer wedges it")
	} else {
		t.Logf("FINDING (nats-server): %v", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = js.Publish(pctx, "t.a", []byte("3"), jetstream.WithMsgID("m3"))
	pcancel()
	info, ierr := s.Info(ctx)
	if ierr == nil {
		t.Logf("a plain publish after it: %v; stream T: %d messages, %s", err, info.State.Msgs, replicas(info))
	} else {
		t.Logf("a plain publish after it: %v; stream info: %v", err, ierr)
	}
}
