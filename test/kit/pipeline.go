package kit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// Source is the captured database as the pipeline's config names it.
type Source struct {
	DSN            string
	Tables         []string
	RoutingColumns map[string]string // table -> column, for tables not routed by tenant_id
	Slot           string            // default sluice_e2e
}

// Settings tune the pipeline; zero values take the defaults noted.
type Settings struct {
	FlushInterval     string // default 1s
	PublisherInterval string // default 500ms
	Partitions        int    // default 8
	OTLPEndpoint      string // telemetry.otlp_endpoint
	LogLevel          string // default info
	// Env is added to every sluice process's environment (SLUICE_* keys
	// override any config key).
	Env []string
	// ReaderNATS, when set, maps the nats-server's URL to the one the
	// reader processes connect to (a Cluster only), e.g. a FaultProxy in
	// front of it; every other process connects to the server directly.
	ReaderNATS func(natsURL string) (string, error)
	// NATSNodes, at 3 or more, runs a Cluster's broker as a JetStream
	// cluster of that many nats-server processes (kit.NATSCluster) with
	// every stream at nats.replicas: 3; else one nats-server.
	NATSNodes int
}

// Pipeline is a running sluice, in one process or many.
type Pipeline interface {
	// Server is the HTTP base URL that answers reads (sluice read/wait).
	Server() string
	// Services are the sluice processes (the chaos loop's victims).
	Services() []*Proc
	// EnsureRunning restarts every process that is not running.
	EnsureRunning(ctx context.Context) error
	// Stop drains and stops everything; it returns the first drain failure.
	Stop() error
	// Tail shows the end of every process's log.
	Tail() string
}

func (s *Settings) defaults() {
	if s.FlushInterval == "" {
		s.FlushInterval = "1s"
	}
	if s.PublisherInterval == "" {
		s.PublisherInterval = "500ms"
	}
	if s.Partitions == 0 {
		s.Partitions = 8
	}
	if s.LogLevel == "" {
		s.LogLevel = "info"
	}
}

// config writes the shared part of a sluice config.
func config(src Source, s Settings, natsURL, catalogURL, packsURL, dataDir string) string {
	replicas := 1
	if s.NATSNodes >= 3 {
		replicas = 3
	}
	if src.Slot == "" {
		src.Slot = "sluice_e2e"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "source:\n  dsn: %s\n  tables: [%s]\n  routing_column: tenant_id\n", src.DSN, strings.Join(src.Tables, ", "))
	if len(src.RoutingColumns) > 0 {
		b.WriteString("  routing_columns:\n")
		var keys []string
		for k := range src.RoutingColumns {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "    %s: %s\n", k, src.RoutingColumns[k])
		}
	}
	fmt.Fprintf(&b, "  slot: %s\n  publication: %s\n  backfill: true\n", src.Slot, src.Slot)
	fmt.Fprintf(&b, "destinations:\n  mode: auto\nnats:\n  url: %s\n  replicas: %d\n", natsURL, replicas)
	if natsURL == "embedded" {
		// Free ports: tests never collide on nats.listen's 4222 or 8222.
		b.WriteString("  listen: 127.0.0.1:0\n  monitor: 127.0.0.1:0\n")
	}
	fmt.Fprintf(&b, "catalog:\n  url: %s\n", catalogURL)
	if packsURL != "" {
		fmt.Fprintf(&b, "packs:\n  url: %s\n", packsURL)
	}
	fmt.Fprintf(&b, "data_dir: %s\ndelivery:\n  flush_interval: %s\n  partitions: %d\npublisher:\n  interval: %s\n",
		dataDir, s.FlushInterval, s.Partitions, s.PublisherInterval)
	fmt.Fprintf(&b, "telemetry:\n  log_level: %s\n  otlp_endpoint: %q\n", s.LogLevel, s.OTLPEndpoint)
	return b.String()
}

// Dev is `sluice dev`: the whole pipeline in one process.
type Dev struct {
	P      *Proc
	Dir    string
	Config string
	server string
}

// NewDev writes the config of a one-process pipeline under dir; Start it
// with EnsureRunning.
func NewDev(dir string, src Source, s Settings) (*Dev, error) {
	s.defaults()
	bin, err := SluiceBin()
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	d := &Dev{Dir: dir, Config: filepath.Join(dir, "sluice.yaml"), server: fmt.Sprintf("http://127.0.0.1:%d", port)}
	cfg := config(src, s, "embedded", "embedded", "", filepath.Join(dir, "data")) + fmt.Sprintf("http:\n  listen: 127.0.0.1:%d\n", port)
	if err := os.WriteFile(d.Config, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	d.P = &Proc{Name: "sluice-dev", Bin: bin, Args: []string{"dev", "--config", d.Config}, Env: s.Env, Dir: dir, Ready: d.server + "/healthz"}
	return d, nil
}

func (d *Dev) Server() string    { return d.server }
func (d *Dev) Services() []*Proc { return []*Proc{d.P} }
func (d *Dev) Tail() string      { return "=== sluice dev\n" + d.P.Tail(6000) }
func (d *Dev) Stop() error       { return d.P.Stop(90 * time.Second) }
func (d *Dev) EnsureRunning(ctx context.Context) error {
	if d.P.Running() {
		return nil
	}
	return startSupervised(ctx, d.P)
}

// Counts is how many replicas of each service a Cluster runs.
type Counts struct{ Readers, Routers, Flushers, Indexers, Publishers int }

// DefaultCounts is the topology: two routers, three flushers, two
// indexers, two publishers, and a standby reader.
var DefaultCounts = Counts{Readers: 2, Routers: 2, Flushers: 3, Indexers: 2, Publishers: 2}

// Cluster is the pipeline as separate OS processes: a real nats-server (or
// a JetStream cluster of them, Settings.NATSNodes), the
// catalog host (`sluice catalog serve`, the embedded chDB behind
// ClickHouse's HTTP interface), and `sluice run <service>` per replica.
type Cluster struct {
	Dir     string
	Config  string
	NATS    *Proc        // the one nats-server; nil with a NATS cluster
	NATSC   *NATSCluster // the JetStream cluster, with Settings.NATSNodes
	Catalog *Proc
	Procs   []*Proc // services, in start order
	natsURL string
	readers []*Proc // publishers: they have the catalog and serve reads
}

// NewCluster prepares a multi-process pipeline under dir; Start it with
// EnsureRunning.
func NewCluster(dir string, src Source, s Settings, n Counts) (*Cluster, error) {
	s.defaults()
	bin, err := SluiceBin()
	if err != nil {
		return nil, err
	}
	catPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Config: filepath.Join(dir, "sluice.yaml")}
	if s.NATSNodes >= 3 {
		if c.NATSC, err = NewNATSCluster(dir, s.NATSNodes); err != nil {
			return nil, err
		}
		c.natsURL = c.NATSC.URL()
	} else if c.NATS, c.natsURL, err = natsServer(dir); err != nil {
		return nil, err
	}

	catConf := filepath.Join(dir, "catalog.yaml")
	if err := os.WriteFile(catConf, []byte(fmt.Sprintf("catalog:\n  url: embedded\ndata_dir: %s\n", filepath.Join(dir, "catalog-host"))), 0o644); err != nil {
		return nil, err
	}
	catAddr := fmt.Sprintf("127.0.0.1:%d", catPort)
	c.Catalog = &Proc{Name: "catalog", Bin: bin, Args: []string{"catalog", "serve", "--listen", catAddr, "--config", catConf}, Dir: dir, Ready: catAddr}

	cfg := config(src, s, c.natsURL, "http://"+catAddr, "file://"+filepath.Join(dir, "packs"), filepath.Join(dir, "data"))
	// catalog serve generates its password there on start; every service
	// reads it (catalog.password_file).
	cfg = strings.Replace(cfg, "catalog:\n", "catalog:\n  password_file: "+filepath.Join(dir, "catalog-host", "catalog_password")+"\n", 1)
	if err := os.WriteFile(c.Config, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	readerNATS := ""
	if s.ReaderNATS != nil && n.Readers > 0 {
		if readerNATS, err = s.ReaderNATS(c.natsURL); err != nil {
			return nil, fmt.Errorf("mapping the readers' NATS URL: %w", err)
		}
	}
	add := func(service string, count int) error {
		for i := 0; i < count; i++ {
			port, err := FreePort()
			if err != nil {
				return err
			}
			name := fmt.Sprintf("%s-%d", service, i)
			env := append([]string{
				fmt.Sprintf("SLUICE_HTTP_LISTEN=127.0.0.1:%d", port),
				"SLUICE_DATA_DIR=" + filepath.Join(dir, "data", name),
			}, s.Env...)
			if service == "reader" && readerNATS != "" {
				env = append(env, "SLUICE_NATS_URL="+readerNATS) // the last value of a key wins
			}
			p := &Proc{Name: name, Bin: bin, Args: []string{"run", service, "--config", c.Config}, Env: env, Dir: dir,
				Ready: fmt.Sprintf("http://127.0.0.1:%d/healthz", port)}
			c.Procs = append(c.Procs, p)
			if service == "publisher" {
				c.readers = append(c.readers, p)
			}
		}
		return nil
	}
	for _, sc := range []struct {
		s string
		n int
	}{{"publisher", n.Publishers}, {"indexer", n.Indexers}, {"flusher", n.Flushers}, {"router", n.Routers}, {"reader", n.Readers}} {
		if err := add(sc.s, sc.n); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// natsServer is one nats-server with JetStream.
func natsServer(dir string) (*Proc, string, error) {
	natsBin, err := NATSServerBin()
	if err != nil {
		return nil, "", err
	}
	natsPort, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	natsConf := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(natsConf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\nmax_payload: 8MB\njetstream {\n  store_dir: %q\n}\n",
		natsPort, filepath.Join(dir, "nats"))), 0o644); err != nil {
		return nil, "", err
	}
	return &Proc{Name: "nats-server", Bin: natsBin, Args: []string{"-c", natsConf}, Dir: dir, Ready: fmt.Sprintf("127.0.0.1:%d", natsPort)},
		fmt.Sprintf("nats://127.0.0.1:%d", natsPort), nil
}

// Server is the HTTP API of the first running publisher.
func (c *Cluster) Server() string {
	for _, p := range c.readers {
		if p.Running() {
			return strings.TrimSuffix(p.Ready, "/healthz")
		}
	}
	return strings.TrimSuffix(c.readers[0].Ready, "/healthz")
}

func (c *Cluster) Services() []*Proc { return c.Procs }

// NATSURL is the broker's client URL (every node's, comma-separated, on a
// NATS cluster).
func (c *Cluster) NATSURL() string { return c.natsURL }

// EnsureRunning starts nats-server (or the NATS cluster) and the catalog
// host first, concurrently, then every service that is not running,
// concurrently.
func (c *Cluster) EnsureRunning(ctx context.Context) error {
	infra, ictx := errgroup.WithContext(ctx)
	if c.NATSC != nil {
		infra.Go(func() error { return c.NATSC.Start(ictx) })
	}
	for _, p := range c.infra() {
		if !p.Running() {
			infra.Go(func() error { return p.Start(ictx) })
		}
	}
	if err := infra.Wait(); err != nil {
		return err
	}
	eg, ctx := errgroup.WithContext(ctx)
	for _, p := range c.Procs {
		if !p.Running() {
			eg.Go(func() error { return startSupervised(ctx, p) })
		}
	}
	return eg.Wait()
}

// startSupervised starts p and, like a process supervisor, starts it again
// when it exits during start-up (at most 3 times). Every such failure is
// kept in p.StartFailures for the test to report: it is a finding.
func startSupervised(ctx context.Context, p *Proc) error {
	for attempt := 1; ; attempt++ {
		err := p.Start(ctx)
		if err == nil || !errors.Is(err, ErrExited) || attempt == 3 {
			return err
		}
		p.mu.Lock()
		p.startFailures = append(p.startFailures, err.Error())
		p.mu.Unlock()
	}
}

// Stop stops the services in pipeline order (each drains into a stage that
// still runs), then the catalog host and nats-server.
func (c *Cluster) Stop() error {
	var first error
	order := []string{"reader", "router", "flusher", "indexer", "publisher"}
	for _, svc := range order {
		eg := errgroup.Group{}
		for _, p := range c.Procs {
			if strings.HasPrefix(p.Name, svc+"-") {
				eg.Go(func() error { return p.Stop(90 * time.Second) })
			}
		}
		if err := eg.Wait(); err != nil && first == nil {
			first = err
		}
	}
	if err := c.Catalog.Stop(30 * time.Second); err != nil && first == nil {
		first = err
	}
	if c.NATS != nil {
		if err := c.NATS.Stop(30 * time.Second); err != nil && first == nil {
			first = err
		}
	}
	if c.NATSC != nil {
		if err := c.NATSC.Stop(30 * time.Second); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// infra is the one nats-server (when there is one) and the catalog host.
func (c *Cluster) infra() []*Proc {
	if c.NATS == nil {
		return []*Proc{c.Catalog}
	}
	return []*Proc{c.NATS, c.Catalog}
}

func (c *Cluster) Tail() string {
	var b strings.Builder
	if c.NATSC != nil {
		b.WriteString(c.NATSC.Tail())
	}
	for _, p := range append(c.infra(), c.Procs...) {
		fmt.Fprintf(&b, "=== %s (started %d times, killed %d)\n%s\n", p.Name, p.Starts(), p.Kills(), p.Tail(1500))
	}
	return b.String()
}

// CLI runs `sluice <args> --server <server>` and returns its stdout.
func CLI(ctx context.Context, server string, args ...string) (string, error) {
	bin, err := SluiceBin()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, append(args, "--server", server)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("sluice %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Wait runs `sluice wait --through-lsn lsn` and returns how long it took.
func Wait(ctx context.Context, server, lsn string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	_, err := CLI(ctx, server, "wait", "--through-lsn", lsn, "--timeout", timeout.String())
	return time.Since(start), err
}
