package flusher

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/services/flusher/internal/delivery"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/state"
)

// Deps is what the flusher needs.
type Deps struct {
	JS      jetstream.JetStream
	Pool    *pgxpool.Pool
	Store   packstore.Store
	Log     *slog.Logger
	Metrics prometheus.Registerer
	// ID names this replica in leases; empty: hostname plus a random suffix.
	ID string
}

// Status is the flusher's JSON-serialisable state.
type Status = delivery.Status

// DestinationStatus is one destination's entry in Status.
type DestinationStatus = delivery.DestinationStatus

// Flusher is the flusher service.
type Flusher struct {
	mgr *delivery.Manager
}

// New builds a flusher. The state schema must be migrated (state.Migrate).
func New(cfg config.Config, deps Deps) (*Flusher, error) {
	if deps.Pool == nil {
		return nil, errors.New("creating flusher: Deps.Pool (the state database) is required")
	}
	schema := cfg.State.Schema
	mgr, err := delivery.New(cfg, delivery.Deps{
		JS: deps.JS, Store: deps.Store,
		Cursors: state.TraceCursors(state.NewCursors(deps.Pool, schema), nil), Leases: state.NewLeases(deps.Pool, schema),
		Log: deps.Log, Metrics: deps.Metrics, ID: deps.ID,
		States: state.NewDestinationStates(deps.Pool, schema),
	})
	if err != nil {
		return nil, err
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	unsafeRules(log).apply(mgr)
	return &Flusher{mgr: mgr}, nil
}

// Run blocks until ctx is cancelled, then drains its buffers (within
// delivery.drain_timeout), releases its leases and returns nil.
func (f *Flusher) Run(ctx context.Context) error { return f.mgr.Run(ctx) }

// Status returns the flusher's state.
func (f *Flusher) Status() Status { return f.mgr.Status() }

// Summary is Status with only its halted destinations and no state
// counts: what periodic samplers and `sluice wait` read.
func (f *Flusher) Summary() Status { return f.mgr.Summary() }

// Resume clears a halted destination.
func (f *Flusher) Resume(destination string) bool { return f.mgr.Resume(destination) }

// SetMemoryLimit sets the Go runtime's soft memory limit to
// delivery.memory_budget plus delivery.FixedOverhead (96 MiB) unless
// GOMEMLIMIT set one; it returns the limit in force. Process-wide: only a
// process running the flusher alone should call it.
func SetMemoryLimit(cfg config.Config) int64 { return delivery.SetMemoryLimit(cfg.Delivery) }

// EnsureConsumers creates the durable consumers of every partition.
func EnsureConsumers(ctx context.Context, js jetstream.JetStream, cfg config.Config) error {
	return delivery.EnsureConsumers(ctx, js, cfg.Delivery)
}
