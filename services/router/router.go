package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/router/internal/route"
	"github.com/sluice-cdc/sluice/services/router/internal/split"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/state"
)

// Stage names the router in metrics and on the dead-letter stream.
const Stage = "router"

const (
	// AckWait is how long an input may stay unacked before JetStream
	// redelivers it to another replica. A handler in progress sends an
	// in-progress ack every AckWait/3; an input a dead router held comes
	// back after AckWait, and the frontier (the router's ack floor) waits
	// for it (ARCHITECTURE.md, "Recovery after a crash"). A redelivery of an
	// input another replica is still routing republishes the same message
	// ids, which ROUTED's duplicate window (2 min) drops.
	AckWait = 15 * time.Second
	// poolBytes bounds the free split buffers kept for reuse.
	poolBytes = 256 << 20
	// headerSlack is kept free of the payload limit for headers that
	// JetStream adds.
	headerSlack = 1 << 10
)

// ErrNoJetStream is returned by New without Deps.JS.
var ErrNoJetStream = errors.New("router needs a JetStream context")

// Deps is what the router needs from its process.
type Deps struct {
	JS      jetstream.JetStream
	Log     *slog.Logger
	Metrics prometheus.Registerer // nil: metrics are not exported
	// Pool is the state database (schema state.schema), optional: with it
	// the router drops the rows of retired destinations (`sluice
	// destinations retire`), polling their states every
	// destinations.state_poll.
	Pool *pgxpool.Pool
}

// Router is the router service.
type Router struct {
	cfg     config.Config
	deps    Deps
	log     *slog.Logger
	h       *route.Handler
	states  *state.DestinationCache // nil without Deps.Pool
	running atomic.Bool

	// Knobs for tests (the package's own): set before Run.
	ackWait time.Duration
	fetch   int
}

// Status is what the router reports on /api/v1/status and `sluice status`.
// The handler's counters (route.Stats) are its fields, flattened in JSON.
type Status struct {
	Running bool `json:"running"`
	Workers int  `json:"workers"`
	route.Stats
}

// New builds a router from the configuration. It does no I/O.
func New(cfg config.Config, deps Deps) (*Router, error) {
	return newRouter(cfg, deps, route.Options{})
}

func newRouter(cfg config.Config, deps Deps, o route.Options) (*Router, error) {
	if deps.JS == nil {
		return nil, ErrNoJetStream
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	var resolve split.Resolve
	switch cfg.Destinations.Mode {
	case "list":
		r, err := split.List(cfg.Destinations.List, cfg.Destinations.Unlisted == "drop")
		if err != nil {
			return nil, fmt.Errorf("configuring router: %w", err)
		}
		resolve = r
	case "auto", "":
		resolve = split.Auto()
	default:
		return nil, fmt.Errorf("configuring router: destinations.mode %q: want auto or list", cfg.Destinations.Mode)
	}
	if cfg.Delivery.Partitions <= 0 {
		return nil, fmt.Errorf("configuring router: delivery.partitions must be positive")
	}
	log := deps.Log.With("service", Stage)
	o.JS = deps.JS
	o.DLQ = natsx.NewDeadLetter(deps.JS, Stage)
	o.Splitter = split.New(split.NewPool(poolBytes), resolve, 0)
	o.Partitions = cfg.Delivery.Partitions
	o.MaxPayload = int(cfg.NATS.MaxPayload) - headerSlack
	o.DrainTimeout = cfg.Delivery.DrainTimeout
	o.Log = log
	o.Metrics = deps.Metrics
	var states *state.DestinationCache
	if deps.Pool != nil {
		states = state.NewDestinationCache(state.NewDestinationStates(deps.Pool, cfg.State.Schema), log)
		o.Retired = func(d string) bool { return states.Get(d) == state.Retired }
	}
	return &Router{cfg: cfg, deps: deps, log: log, h: route.New(o), states: states, ackWait: AckWait}, nil
}

// ConsumerConfig is the durable consumer the router replicas share.
func ConsumerConfig(cfg config.Config) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       proto.ConsumerRouter,
		Description:   "sluice router: CHANGES -> ROUTED",
		FilterSubject: proto.SubjectChangesAll,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       AckWait,
		MaxAckPending: cfg.Router.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxDeliver:    -1,
	}
}

// ReplayConsumerConfig is the durable consumer of REPLAY, the replays of
// router dead letters: routed like CHANGES by the same handler. They come
// from the operator, never from the reader, so they carry no place in the
// reader's publish chain and their own Nats-Msg-Id ("replay:<seq>"); their
// rows keep their positions, and apply is by position, newest wins, so a
// replayed old change never overrides a newer version of its row.
func ReplayConsumerConfig(cfg config.Config) jetstream.ConsumerConfig {
	cc := ConsumerConfig(cfg)
	cc.Durable = proto.ConsumerRouterReplay
	cc.Description = "sluice router: REPLAY (replayed dead letters) -> ROUTED"
	cc.FilterSubject = proto.SubjectReplayAll
	return cc
}

// Run creates the consumers (idempotently) and routes until ctx ends; then
// it finishes the batches in hand and returns nil.
func (r *Router) Run(ctx context.Context) error {
	cons, replay, err := r.ensureConsumers(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	workers := max(r.cfg.Router.Workers, 1)
	r.running.Store(true)
	defer r.running.Store(false)
	g, gctx := errgroup.WithContext(ctx)
	if r.states != nil {
		// One load before routing, so a retired destination is known from
		// the first batch; a failure is logged and polled again.
		if err := r.states.Refresh(ctx); err != nil {
			r.log.Warn("loading destination states; routing to every destination until they load", "error", err)
		}
		g.Go(func() error { return r.states.Run(gctx, r.cfg.Destinations.StatePoll) })
	}
	consume := func(c jetstream.Consumer) func() error {
		return func() error {
			return natsx.Consume(gctx, c, r.h.Handle, natsx.ConsumeOptions{
				Stage:           Stage,
				DLQ:             natsx.NewDeadLetter(r.deps.JS, Stage),
				Fetch:           r.fetch,
				Log:             r.log,
				Metrics:         r.deps.Metrics,
				InProgressEvery: r.ackWait / 3,
			})
		}
	}
	for range workers {
		g.Go(consume(cons))
	}
	g.Go(consume(replay)) // replays are rare: one worker
	r.log.Info("router started", "workers", workers, "mode", r.cfg.Destinations.Mode, "partitions", r.cfg.Delivery.Partitions)
	err = g.Wait()
	r.log.Info("router stopped")
	return err
}

// ensureConsumers provisions the streams and the durable consumers of
// CHANGES and REPLAY, retrying with backoff while JetStream is not ready.
func (r *Router) ensureConsumers(ctx context.Context) (changes, replay jetstream.Consumer, err error) {
	cc, rc := ConsumerConfig(r.cfg), ReplayConsumerConfig(r.cfg)
	cc.AckWait, rc.AckWait = r.ackWait, r.ackWait
	for attempt := 1; ; attempt++ {
		err = natsx.EnsureStreams(ctx, r.deps.JS, r.cfg)
		if err == nil {
			changes, err = r.deps.JS.CreateOrUpdateConsumer(ctx, proto.StreamChanges, cc)
		}
		if err == nil {
			replay, err = r.deps.JS.CreateOrUpdateConsumer(ctx, proto.StreamReplay, rc)
		}
		if err == nil {
			return changes, replay, nil
		}
		if attempt == 1 {
			r.log.Warn("creating the router consumers failed; retrying with backoff", "error", err)
		}
		if !natsx.Sleep(ctx, natsx.Backoff(min(attempt, 6))) {
			return nil, nil, fmt.Errorf("creating consumers %s on %s and %s on %s: %w", proto.ConsumerRouter, proto.StreamChanges, proto.ConsumerRouterReplay, proto.StreamReplay, ctx.Err())
		}
	}
}

// Status reports what the router has done since it started.
func (r *Router) Status() Status {
	return Status{Running: r.running.Load(), Workers: max(r.cfg.Router.Workers, 1), Stats: r.h.Stats()}
}
