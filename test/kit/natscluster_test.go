package kit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
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

// TestNATSCatchupLastMsgID looks for a nats-server defect the cluster soak
// met: a restarted node's stream replica that stops applying the reader's
// chained publishes ("critical write error: last msgid mismatch") and
// fails its health check from then on, so the stream runs on two of three
// replicas and the next node loss takes its quorum. Its cause, as far as
// the code shows (server/jetstream_cluster.go, v2.15.3): processCatchupMsg,
// which stores the messages a replica catches up from a snapshot, does not
// update the stream's last message id, and a follower checks
// Nats-Expected-Last-Msg-Id when it applies an entry. The test publishes
// as the reader does (pipelined, each message naming the one before it;
// after a failure one at a time, unchained, until the broker stores a new
// one) while the stream leader is killed (kill -9) and restarted, three
// times, and reports each restarted node's health. Where a node shows the
// defect it checks the remedy the chaos applies (Chaos.repair): a restart
// of that node, after which it is healthy and applies chained publishes.
// It does not fail when the defect does not show: it depends on timing
// (the soak met it in 4 of 6 runs).
func TestNATSCatchupLastMsgID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, js, _ := startNATSCluster(t, ctx)
	pub := &chainPublisher{js: js}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- pub.run(pctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(2 * time.Second)
	var broken []*Proc
	for round := range 3 {
		leader, err := c.WaitLeader(ctx, "T", nil, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		leader.Kill()
		time.Sleep(time.Duration(2+round*3) * time.Second) // down for 2, 5, 8 s
		if err := leader.Start(ctx); err != nil {
			t.Fatal(err)
		}
		err = c.WaitHealthy(ctx, 30*time.Second)
		mismatch := leader.Grep("last msgid mismatch")
		t.Logf("round %d: %s killed and restarted; publisher: %v; health: %v; last msgid mismatch in its log: %d lines", round, leader.Name, pub, err, len(mismatch))
		if len(mismatch) > 0 {
			t.Logf("FINDING (nats-server): %s", mismatch[0])
			broken = append(broken, leader)
			break
		}
	}
	if len(broken) == 0 {
		t.Logf("the defect did not show in this run")
		return
	}
	n := broken[0]
	if err := n.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, time.Minute); err != nil {
		t.Fatalf("after the restart of %s: %v", n.Name, err)
	}
	before := pub.stored.Load()
	time.Sleep(3 * time.Second)
	if err := c.WaitHealthy(ctx, 10*time.Second); err != nil || pub.stored.Load() == before {
		t.Fatalf("after the restart of %s: health %v, %d messages stored since", n.Name, err, pub.stored.Load()-before)
	}
	t.Logf("REMEDY: %s healthy and applying chained publishes after its restart (%d stored since)", n.Name, pub.stored.Load()-before)
}

// chainPublisher publishes to T as the reader publishes to CHANGES:
// pipelined, each message naming the one sent before it
// (Nats-Expected-Last-Msg-Id); after any failure it waits out what is in
// flight and sends from the first unacked message one at a time,
// unchained, until the broker stores one that is not a duplicate.
type chainPublisher struct {
	js       jetstream.JetStream
	stored   atomic.Int64
	failures atomic.Int64
	mu       sync.Mutex
	lastErr  error
}

func (p *chainPublisher) fail(err error) {
	p.failures.Add(1)
	p.mu.Lock()
	p.lastErr = err
	p.mu.Unlock()
}

func (p *chainPublisher) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%d stored, %d publish failures (last: %v)", p.stored.Load(), p.failures.Load(), p.lastErr)
}

func (p *chainPublisher) run(ctx context.Context) error {
	next := 0 // the first message not known to be stored
	for ctx.Err() == nil {
		// Catch up: one at a time, unchained.
		for ctx.Err() == nil {
			id := fmt.Sprintf("m%d", next)
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ack, err := p.js.Publish(actx, "t.a", []byte(id), jetstream.WithMsgID(id))
			cancel()
			if err != nil {
				p.fail(err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			next++
			p.stored.Add(1)
			if !ack.Duplicate {
				break
			}
		}
		// Chained, 32 in flight.
		type sent struct {
			seq int
			fut jetstream.PubAckFuture
		}
		var inflight []sent
		failed := false
		last := fmt.Sprintf("m%d", next-1)
		seq := next
		for ctx.Err() == nil && !failed {
			id := fmt.Sprintf("m%d", seq)
			fut, err := p.js.PublishAsync("t.a", []byte(id), jetstream.WithMsgID(id), jetstream.WithExpectLastMsgID(last))
			if err != nil {
				p.fail(err)
				failed = true
				break
			}
			last = id
			seq++
			inflight = append(inflight, sent{seq - 1, fut})
			// Settle what has been answered; block only at 32 in flight.
			for len(inflight) > 0 && !failed {
				f := inflight[0]
				timeout := time.Duration(0)
				if len(inflight) >= 32 {
					timeout = 5 * time.Second
				}
				select {
				case <-f.fut.Ok():
					next = f.seq + 1
					p.stored.Add(1)
					inflight = inflight[1:]
					continue
				case err := <-f.fut.Err():
					p.fail(err)
					failed = true
				case <-ctx.Done():
					return nil
				case <-after(timeout):
					if timeout > 0 {
						p.fail(errors.New("no ack within 5s"))
						failed = true
					}
				}
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		for _, s := range inflight { // wait them out; what was stored is deduplicated on resend
			select {
			case <-s.fut.Ok():
			case <-s.fut.Err():
			case <-time.After(5 * time.Second):
			case <-ctx.Done():
				return nil
			}
		}
	}
	return nil
}

// after is time.After, or a closed channel for 0 (a poll).
func after(d time.Duration) <-chan time.Time {
	if d == 0 {
		c := make(chan time.Time)
		close(c)
		return c
	}
	return time.After(d)
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
