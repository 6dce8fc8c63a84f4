package kit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// NATSCluster is a JetStream cluster of real nats-server processes on
// loopback: each node has its own client, route and monitoring port and
// store directory, and routes to every other node. Streams created on it
// with nats.replicas: 3 have a replica on every node.
type NATSCluster struct {
	Nodes   []*Proc
	urls    []string
	monitor []string // monitoring base URLs
}

// NewNATSCluster writes the configuration of an n-node cluster under dir;
// start it with Start.
func NewNATSCluster(dir string, n int) (*NATSCluster, error) {
	bin, err := NATSServerBin()
	if err != nil {
		return nil, err
	}
	type ports struct{ client, route, http int }
	ps := make([]ports, n)
	for i := range ps {
		for _, p := range []*int{&ps[i].client, &ps[i].route, &ps[i].http} {
			if *p, err = FreePort(); err != nil {
				return nil, err
			}
		}
	}
	c := &NATSCluster{}
	for i, p := range ps {
		var routes []string
		for j, q := range ps {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", q.route))
			}
		}
		name := fmt.Sprintf("nats-%d", i)
		conf := filepath.Join(dir, name+".conf")
		// lame_duck is irrelevant (nodes are killed, not drained); the
		// short ping keeps a stalled node's routes from lingering.
		body := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
max_payload: 8MB
ping_interval: "2s"
ping_max: 2
jetstream {
  store_dir: %q
}
cluster {
  name: sluice
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, name, p.client, p.http, filepath.Join(dir, name), p.route, strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			return nil, err
		}
		// Ready: the node serves JetStream and is current with the meta
		// leader. Its stream replicas may still be catching up (Health
		// reports them): a replica's state is the cluster's to heal, and a
		// restart must not wait on it.
		c.Nodes = append(c.Nodes, &Proc{Name: name, Bin: bin, Args: []string{"-c", conf}, Dir: dir,
			Ready: fmt.Sprintf("http://127.0.0.1:%d/healthz?js-server-only=true", p.http)})
		c.monitor = append(c.monitor, fmt.Sprintf("http://127.0.0.1:%d", p.http))
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", p.client))
	}
	return c, nil
}

// URL lists every node's client URL, comma-separated (as nats.url takes it).
func (c *NATSCluster) URL() string { return strings.Join(c.urls, ",") }

// Start starts every node that is not running, concurrently (a lone node
// is not healthy until a quorum has formed), then waits until the meta
// group's leader sees every node current: before that a stream at
// replicas 3 cannot be placed ("no suitable peers for placement").
func (c *NATSCluster) Start(ctx context.Context) error {
	eg, ectx := errgroup.WithContext(ctx)
	for _, p := range c.Nodes {
		if !p.Running() {
			eg.Go(func() error { return p.Start(ectx) })
		}
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	return c.waitFormed(ctx, 2*time.Minute)
}

// waitFormed retries until a node reports a meta leader with every other
// node a current replica.
func (c *NATSCluster) waitFormed(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		for _, m := range c.monitor {
			var jsz struct {
				Meta *struct {
					Leader   string `json:"leader"`
					Replicas []struct {
						Current bool `json:"current"`
						Offline bool `json:"offline"`
					} `json:"replicas"`
				} `json:"meta_cluster"`
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, m+"/jsz", nil)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&jsz)
				resp.Body.Close()
			}
			cancel()
			if err != nil || jsz.Meta == nil || jsz.Meta.Leader == "" {
				last = fmt.Sprintf("%s: no meta leader (%v)", m, err)
				continue
			}
			current := 0
			for _, r := range jsz.Meta.Replicas {
				if r.Current && !r.Offline {
					current++
				}
			}
			if current == len(c.Nodes)-1 {
				return nil
			}
			last = fmt.Sprintf("%s: %d of %d other nodes current", m, current, len(c.Nodes)-1)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the NATS cluster did not form within %s: %s", timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop stops every node.
func (c *NATSCluster) Stop(timeout time.Duration) error {
	var first error
	for _, p := range c.Nodes {
		if !p.Running() {
			continue // killed by the test: its exit is not a drain failure
		}
		_ = p.Signal(syscall.SIGCONT) // a stalled node cannot handle SIGTERM
		if err := p.Stop(timeout); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Node is the node named name (its server_name), or nil.
func (c *NATSCluster) Node(name string) *Proc {
	for _, p := range c.Nodes {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Leader returns the node that leads stream's Raft group, asking the
// running nodes.
func (c *NATSCluster) Leader(ctx context.Context, stream string) (*Proc, error) {
	var urls []string
	for i, p := range c.Nodes {
		if p.Running() {
			urls = append(urls, c.urls[i])
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connecting to the NATS cluster: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", stream, err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return nil, fmt.Errorf("stream %s has no leader", stream)
	}
	if p := c.Node(info.Cluster.Leader); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("stream %s: leader %q is not a node of the cluster", stream, info.Cluster.Leader)
}

// WaitLeader retries until stream has a leader other than not (nil: any
// leader) and returns it.
func (c *NATSCluster) WaitLeader(ctx context.Context, stream string, not *Proc, timeout time.Duration) (*Proc, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		p, err := c.Leader(ctx, stream)
		if err == nil && p != not {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a new leader of %s: %v (last: %v)", stream, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Health is node i's full health check (every stream and consumer
// replica current): "" when healthy, else the server's errors.
func (c *NATSCluster) Health(ctx context.Context, i int) string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.monitor[i]+"/healthz?details=true", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// WaitHealthy retries until every running node passes its full health
// check, and returns the last errors when timeout passes first.
func (c *NATSCluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var bad []string
		for i, p := range c.Nodes {
			if !p.Running() {
				continue
			}
			if h := c.Health(ctx, i); h != "" {
				bad = append(bad, p.Name+": "+h)
			}
		}
		if len(bad) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("NATS nodes not healthy after %s: %s", timeout, strings.Join(bad, "; "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// notHealthy says why the cluster cannot take a fault now ("" when it
// can): a node is down, stalled (stalled is the caller's knowledge: a
// stopped process cannot say it), or fails its full health check.
func (c *NATSCluster) notHealthy(ctx context.Context, stalled bool) string {
	if stalled {
		return "a node is stalled"
	}
	for i, p := range c.Nodes {
		if !p.Running() {
			return p.Name + " is down"
		}
		if h := c.Health(ctx, i); h != "" {
			return p.Name + " is not healthy: " + h
		}
	}
	return ""
}

// Tail is the end of every node's log.
func (c *NATSCluster) Tail() string {
	var b strings.Builder
	for _, p := range c.Nodes {
		fmt.Fprintf(&b, "=== %s (started %d times, killed %d)\n%s\n", p.Name, p.Starts(), p.Kills(), p.Tail(1500))
	}
	return b.String()
}
