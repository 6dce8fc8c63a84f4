package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/secret"
	"github.com/sluice-cdc/sluice/shared/state"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// Needs says which resources a process opens.
type Needs struct {
	State   bool // cursors and leases (reader, flusher)
	Catalog bool // the ClickHouse catalog (indexer, publisher, reads)
	Packs   bool // the pack store (flusher, indexer)
	// EmbeddedNATS allows nats.url: embedded (only `sluice dev`).
	EmbeddedNATS bool
}

// Stack is one process's shared resources.
type Stack struct {
	Cfg      config.Config
	Log      *slog.Logger
	Registry *prometheus.Registry
	NATS     *server.Server // the embedded server, or nil
	NC       *nats.Conn
	JS       jetstream.JetStream
	State    *pgxpool.Pool
	Catalog  catalog.Conn
	Packs    packstore.Store
	HTTP     *httpx.Server
	// Instance names this process in leases (HolderID).
	Instance string

	natsURL string
	closers []func(context.Context) error
}

// Connect opens another NATS connection for one service of a process that
// hosts several (sluice dev): a connection is one socket, one reader
// goroutine in the server and one async-publish window in the client, so
// each service gets its own, as it would as a separate process. (At 1,000
// tenants, four paired runs showed no throughput difference either way on
// this machine.) It is drained at Close, before the embedded server stops.
func (s *Stack) Connect(ctx context.Context, service string) (*nats.Conn, jetstream.JetStream, error) {
	nc, js, err := natsx.Connect(ctx, s.Cfg.NATS, s.natsURL, "sluice-"+service)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting %s to NATS: %w", service, err)
	}
	s.closers = append(s.closers, func(context.Context) error { return nc.Drain() })
	return nc, js, nil
}

// Open opens what needs asks for. On error everything opened so far is
// closed again.
func Open(ctx context.Context, cfg config.Config, service string, needs Needs) (_ *Stack, err error) {
	s := &Stack{Cfg: cfg, Log: telemetry.NewLogger(cfg.Telemetry, service), Registry: telemetry.NewRegistry(), Instance: newInstanceID()}
	defer func() {
		if err != nil {
			s.Close(context.Background())
		}
	}()
	shutdown, err := telemetry.Setup(ctx, service, cfg.Telemetry)
	if err != nil {
		return nil, fmt.Errorf("setting up telemetry: %w", err)
	}
	s.closers = append(s.closers, shutdown)

	if err := secret.DataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	url, predecessor := "", ""
	if cfg.NATS.URL == "embedded" {
		if !needs.EmbeddedNATS {
			return nil, errors.New("nats.url is embedded, which only `sluice dev` can run: point nats.url at a shared NATS server (nats://host:4222) to run services as separate processes")
		}
		// The embedded server's store is data_dir's: one process at a
		// time, and a predecessor that died holding it is known dead.
		pred, lock, err := lockDataDir(cfg.DataDir, s.Instance)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func(context.Context) error { return lock.release() })
		predecessor = pred
		if err := embeddedAuth(&cfg); err != nil {
			return nil, err
		}
		s.Cfg = cfg // the services of this process connect with the token
		ns, err := startEmbeddedNATS(cfg, s.Log)
		if err != nil {
			return nil, fmt.Errorf("starting the embedded NATS server: %w", err)
		}
		s.NATS = ns
		s.closers = append(s.closers, func(context.Context) error { ns.Shutdown(); ns.WaitForShutdown(); return nil })
		url = ns.ClientURL()
	}
	s.natsURL = url
	nc, js, err := natsx.Connect(ctx, cfg.NATS, url, "sluice-"+service)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS: %w", err)
	}
	s.NC, s.JS = nc, js
	s.closers = append(s.closers, func(context.Context) error { return nc.Drain() })
	if err := natsx.EnsureStreams(ctx, js, cfg); err != nil {
		return nil, fmt.Errorf("provisioning JetStream streams: %w", err)
	}
	// Says it (metric, log) when the NATS cluster loses its quorum.
	health := natsx.WatchHealth(js, s.Log, s.Registry)
	s.closers = append(s.closers, func(context.Context) error { health.Stop(); return nil })

	if needs.State {
		pool, err := pgxpool.New(ctx, cfg.StateDSN())
		if err != nil {
			return nil, fmt.Errorf("connecting to the state database: %w", err)
		}
		s.State = pool
		s.closers = append(s.closers, func(context.Context) error { pool.Close(); return nil })
		if err := retry(ctx, 30*time.Second, func() error { return state.Migrate(ctx, pool, cfg.State.Schema) }); err != nil {
			return nil, fmt.Errorf("preparing the state schema %q: %w", cfg.State.Schema, err)
		}
	}
	if needs.Packs {
		store, err := packstore.OpenConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("opening the pack store: %w", err)
		}
		s.Packs = store
	}
	if needs.Catalog {
		conn, err := catalog.Open(ctx, cfg.Catalog, cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("opening the catalog: %w", err)
		}
		s.Catalog = conn
		s.closers = append(s.closers, func(context.Context) error { return conn.Close() })
	}
	s.HTTP = httpx.New(cfg.HTTP.Listen, cfg.HTTP.Token, s.Registry, s.Log, httpx.InsecureNoAuth(cfg.HTTP.InsecureNoAuth))
	warnPlaintext(cfg, s.Log)
	if cfg.Catalog.InsecureNoTLS && strings.HasPrefix(cfg.Packs.URL, "s3://") && cfg.Catalog.URL != "embedded" {
		s.Log.Warn("catalog.insecure_no_tls is set: the pack store's S3 keys travel in plaintext SQL to the catalog server")
	}
	if cfg.HTTP.Pprof {
		s.HTTP.Handle("/debug/pprof/", http.HandlerFunc(pprof.Index))
		s.HTTP.Handle("/debug/pprof/profile", http.HandlerFunc(pprof.Profile))
		s.HTTP.Handle("/debug/pprof/trace", http.HandlerFunc(pprof.Trace))
	}
	if predecessor != "" {
		s.recoverFrom(ctx, predecessor)
	}
	return s, nil
}

// Close closes everything in reverse order of opening.
func (s *Stack) Close(ctx context.Context) {
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i](ctx); err != nil {
			s.Log.Warn("closing", "err", err)
		}
	}
	s.closers = nil
}

// retry runs f until it succeeds, ctx ends or budget passes.
func retry(ctx context.Context, budget time.Duration, f func() error) error {
	deadline := time.Now().Add(budget)
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		if !natsx.Sleep(ctx, natsx.Backoff(attempt)) {
			return ctx.Err()
		}
	}
}

// Component is a service as a process runs it.
type Component struct {
	Name   string
	Run    func(context.Context) error
	Status func() any
	// Summary is a cheap status for what polls (the UI's series, `sluice
	// wait` through GET /api/v1/status?view=halts): what needs attention,
	// not every destination's state. nil: Status.
	Summary func() any
}

// Serve runs the HTTP server and the components until ctx ends or one of
// them fails, then stops the components one at a time in the order given
// (pipeline order, so each stage drains into one that still runs), each
// within drain_timeout plus a margin, and finally the HTTP server.
func (s *Stack) Serve(ctx context.Context, comps []Component) error {
	httpCtx, stopHTTP := context.WithCancel(context.Background())
	defer stopHTTP()
	httpDone := make(chan error, 1)
	go func() { httpDone <- s.HTTP.Run(httpCtx) }()

	type running struct {
		Component
		cancel context.CancelFunc
		done   chan error
	}
	var runs []running
	failed := make(chan error, len(comps))
	for _, c := range comps {
		cctx, cancel := context.WithCancel(context.Background())
		r := running{c, cancel, make(chan error, 1)}
		go func() {
			err := c.Run(cctx)
			if err != nil && cctx.Err() == nil {
				failed <- fmt.Errorf("%s: %w", c.Name, err)
			}
			r.done <- err
		}()
		runs = append(runs, r)
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-failed:
		s.Log.Error("a service failed; shutting down", "err", runErr)
	case err := <-httpDone:
		runErr = fmt.Errorf("http server: %w", err)
		httpDone <- nil
	}
	deadline := s.Cfg.Delivery.DrainTimeout + 15*time.Second
	for _, r := range runs {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil && !errors.Is(err, context.Canceled) {
				s.Log.Warn("service stopped with an error", "service", r.Name, "err", err)
			}
		case <-time.After(deadline):
			s.Log.Error("service did not stop in time", "service", r.Name, "deadline", deadline)
		}
	}
	stopHTTP()
	<-httpDone
	return runErr
}

// warnPlaintext logs, once at start, every link off loopback that carries
// tenant data or credentials without TLS and that the configuration
// allows (refusals are config's: checkExposure).
func warnPlaintext(cfg config.Config, log *slog.Logger) {
	for _, d := range []struct{ key, dsn string }{{"source.dsn", cfg.Source.DSN}, {"source.primary_dsn", cfg.Source.PrimaryDSN}, {"state.dsn", cfg.State.DSN}} {
		if host := config.PlaintextPostgres(d.dsn); host != "" {
			log.Warn(d.key+" reaches Postgres off loopback without requiring TLS: every tenant's rows (and, with the server's `password` auth method, the password) cross the network readable; add sslmode=verify-full (sslrootcert for a private CA)", "host", host)
		}
	}
	if cfg.Catalog.InsecureNoTLS && cfg.Catalog.Password != "" && cfg.Catalog.URL != "embedded" {
		log.Warn("catalog.insecure_no_tls is set: the catalog password travels in plaintext to the catalog server")
	}
	if cfg.NATS.InsecureNoTLS && (cfg.NATS.Password != "" || cfg.NATS.Token != "") {
		log.Warn("nats.insecure_no_tls is set: the NATS password or token travels in plaintext")
	}
	if e := cfg.Telemetry.OTLPEndpoint; e != "" && !cfg.Telemetry.OTLPTLS && cfg.Telemetry.OTLPTLSCA == "" && !config.LoopbackAddr(e) {
		log.Warn("traces go to the OTLP collector without TLS (telemetry.otlp_tls): span attributes name destinations (telemetry.destination_names: hash or omit hides them)", "endpoint", e)
	}
}
