package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// Deps is what the publisher needs.
type Deps struct {
	JS      jetstream.JetStream
	Log     *slog.Logger
	Metrics prometheus.Registerer
	Catalog catalog.Conn
	// Packs is the pack store compaction writes to and garbage collection
	// deletes from (lifecycle.go); nil: no compaction, GC or purge.
	Packs packstore.Store
	// Holder names this replica in the publisher lease; empty:
	// host/pid/random.
	Holder string
}

// Status is the publisher's state for `sluice status`.
type Status struct {
	Holder        string    `json:"holder"`
	LeaseHeld     bool      `json:"lease_held"`
	LeaseTerm     uint64    `json:"lease_term,omitempty"`
	LatestVersion uint64    `json:"latest_version"`
	ThroughLSN    string    `json:"through_lsn"`
	LastPublish   time.Time `json:"last_publish,omitempty"`
	LastPublishMs float64   `json:"last_publish_ms"`
	Publishes     int64     `json:"publishes"`
	FrontierStage string    `json:"frontier_stage"`
	// ExpiryHorizon: snapshots below it expire unless pinned.
	ExpiryHorizon  uint64 `json:"expiry_horizon"`
	FrontierTarget string `json:"frontier_target"` // the L being proven
	LastError      string `json:"last_error,omitempty"`
}

// Publisher is the publisher component.
type Publisher struct {
	cfg    config.Config
	deps   Deps
	log    *slog.Logger
	cat    *catalog.Catalog
	holder string
	fr     *Frontier

	latency     prometheus.Histogram
	publishes   prometheus.Counter
	through     prometheus.Gauge
	trimmed     *prometheus.CounterVec
	trimmedAt   time.Time
	expiredAt   time.Time     // the last retention advance (expire)
	expireEvery time.Duration // how often it runs (expireEvery; tests lower it)
	lc          *lifecycle    // compaction, GC, purge; nil without a pack store

	mu     sync.Mutex // guards status
	status Status
}

// New returns a publisher; Run starts it.
func New(cfg config.Config, deps Deps) (*Publisher, error) {
	if deps.JS == nil || deps.Catalog == nil {
		return nil, errors.New("creating publisher: JS and Catalog are required")
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	holder := deps.Holder
	if holder == "" {
		host, _ := os.Hostname()
		holder = fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8])
	}
	log := deps.Log.With("service", "publisher")
	p := &Publisher{
		cfg: cfg, deps: deps, log: log, holder: holder,
		cat:         catalog.New(deps.Catalog, catalog.Options{Prefix: cfg.Catalog.Prefix, Log: log, GCGrace: cfg.Catalog.GCGrace}),
		fr:          NewFrontier(deps.JS, cfg.Delivery.Partitions),
		expireEvery: expireEvery,
		latency: telemetry.MustRegister(deps.Metrics, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_publisher_publish_seconds",
			Help: "Time to publish one snapshot, lease renewal included.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})),
		publishes: telemetry.MustRegister(deps.Metrics, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_publisher_publishes_total", Help: "Snapshots published."})),
		trimmed: telemetry.MustRegister(deps.Metrics, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_publisher_trimmed_messages_total",
			Help: "Messages purged from the data streams once every consumer acked them."}, []string{"stream"})),
		through: telemetry.MustRegister(deps.Metrics, prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_publisher_through_lsn_bytes",
			Help: "through_lsn of the latest published snapshot, as a WAL byte position."})),
	}
	p.status.Holder = holder
	if deps.Packs != nil {
		p.lc = newLifecycle(deps.Metrics, deps.Packs, "compact"+uuid.NewString()[:8]).withClaims(deps.Metrics, deps.JS, log)
	}
	telemetry.MustRegister(deps.Metrics, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_publisher_lease_held",
		Help: "1 while this publisher holds the publisher lease (exactly one replica should)."}, func() float64 {
		if p.Status().LeaseHeld {
			return 1
		}
		return 0
	}))
	return p, nil
}

// Catalog returns the catalog the publisher writes.
func (p *Publisher) Catalog() *catalog.Catalog { return p.cat }

// Status returns a snapshot of the publisher's state.
func (p *Publisher) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.status
	stage, target := p.fr.State()
	s.FrontierStage, s.FrontierTarget = stage, target.String()
	return s
}

func (p *Publisher) update(f func(s *Status)) {
	p.mu.Lock()
	f(&p.status)
	p.mu.Unlock()
}

// Run publishes until ctx ends, then releases the lease. It returns nil on
// a clean shutdown and an error only when the catalog is refused.
func (p *Publisher) Run(ctx context.Context) error {
	if err := p.cat.EnsureSchema(ctx); err != nil {
		return fmt.Errorf("starting publisher: %w", err)
	}
	var published proto.LSN
	if s, err := p.cat.Latest(ctx); err == nil {
		published = s.ThroughLSN
		p.update(func(st *Status) { st.LatestVersion, st.ThroughLSN = s.Version, s.ThroughLSN.String() })
	}
	p.log.Info("publisher started", "holder", p.holder, "interval", p.cfg.Publisher.Interval)
	ttl := p.cfg.Publisher.LeaseTTL
	p.trimmedAt = time.Now() // the first trim one trimEvery after start
	var lease catalog.Lease
	held := false
	// An idle tick renews the lease only once a third of its TTL has passed
	// since it was last renewed (by a renewal, a publish or the
	// acquisition), not on every tick: each renewal is two statements, and
	// at a 200 ms interval they kept the engine busy for nothing. Safety
	// does not depend on it (every publish is fenced on the live lease in
	// its statement); liveness keeps two thirds of the TTL (6.7 s of the
	// default 10 s) for a renewal to land.
	renewEvery := ttl / 3
	var renewed time.Time
	tick := time.NewTicker(p.cfg.Publisher.Interval)
	defer tick.Stop()
	defer func() {
		if held {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := p.cat.ReleaseLease(rctx, lease); err != nil {
				p.log.Warn("releasing publisher lease failed; it expires on its own", "err", err)
			}
		}
		p.log.Info("publisher stopped")
	}()
	for {
		if !held {
			l, err := p.cat.AcquireLease(ctx, p.holder, ttl)
			switch {
			case err == nil:
				lease, held, renewed = l, true, time.Now()
				p.update(func(s *Status) { s.LeaseHeld, s.LeaseTerm, s.LastError = true, l.Term, "" })
			case ctx.Err() != nil:
				return nil
			default:
				p.update(func(s *Status) { s.LeaseHeld, s.LastError = false, err.Error() })
			}
		}
		if held {
			p.trim(ctx)
			p.expire(ctx, lease)
			through, err := p.fr.Step(ctx)
			if err != nil && ctx.Err() == nil {
				p.log.Debug("sampling frontier", "err", err)
			}
			if through < published {
				through = published
			}
			// A proven through beyond the last publish publishes anyway:
			// counting the pending packs would only cost a statement (on
			// chDB every statement waits for the one before it).
			var pending uint64
			if through <= published {
				pending, err = p.cat.Pending(ctx)
			}
			switch {
			case err != nil:
				p.update(func(s *Status) { s.LastError = err.Error() })
			case pending > 0 || through > published:
				res, err := p.publish(ctx, lease, ttl, through)
				lease = res.Lease
				switch {
				case err == nil:
					published = res.Snapshot.ThroughLSN
					renewed = time.Now() // the publish renewed the lease
				case errors.Is(err, catalog.ErrLeaseLost):
					p.log.Warn("publisher lease lost; re-acquiring", "err", err)
					held = false
					p.update(func(s *Status) { s.LeaseHeld, s.LastError = false, err.Error() })
				case errors.Is(err, catalog.ErrPublishConflict):
					p.log.Error("snapshot published twice at one version; operator attention needed", "err", err)
					p.update(func(s *Status) { s.LastError = err.Error() })
				case ctx.Err() != nil:
				default:
					p.log.Warn("publishing snapshot failed", "err", err)
					p.update(func(s *Status) { s.LastError = err.Error() })
				}
			case time.Since(renewed) < renewEvery:
				// Idle, and the lease was renewed recently enough.
			default:
				l, err := p.cat.RenewLease(ctx, lease, ttl)
				if err != nil && ctx.Err() == nil {
					if errors.Is(err, catalog.ErrLeaseLost) {
						held = false
						p.log.Warn("publisher lease lost; re-acquiring", "err", err)
					}
					p.update(func(s *Status) { s.LeaseHeld, s.LastError = held, err.Error() })
				} else if err == nil {
					lease, renewed = l, time.Now()
				}
			}
		}
		// The lifecycle's jobs (compaction, GC, purges) come after the
		// tick's publish, never before it, and each counts its interval
		// from the end of its last pass (lifecycleStep): a pass can take
		// longer than the lease's TTL and than its own interval on a busy
		// catalog (a compaction of a backfilled table rewrites all of it),
		// and before, one that lost the lease was followed by the lease's
		// re-acquisition and at once by the next pass, so no publish ran
		// again and `sluice wait` never returned (issue 32).
		if held {
			l, err := p.lifecycleStep(ctx, lease)
			lease = l
			if err != nil {
				p.log.Warn("publisher lease lost; re-acquiring", "err", err)
				held = false
				p.update(func(s *Status) { s.LeaseHeld, s.LastError = false, err.Error() })
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// maxLinks bounds the span links of one publish.
const maxLinks = 128

func (p *Publisher) publish(ctx context.Context, l catalog.Lease, ttl time.Duration, through proto.LSN) (catalog.PublishResult, error) {
	ctx, span := otel.Tracer("github.com/sluice-cdc/sluice/services/publisher").Start(ctx, "publisher.publish")
	defer span.End()
	start := time.Now()
	res, err := p.cat.Publish(ctx, l, ttl, through)
	if err != nil {
		return res, err
	}
	d := time.Since(start)
	p.latency.Observe(d.Seconds())
	p.publishes.Inc()
	p.through.Set(float64(res.Snapshot.ThroughLSN))
	span.SetAttributes(attribute.Int64("sluice.version", int64(res.Snapshot.Version)), attribute.String("sluice.through_lsn", res.Snapshot.Through),
		attribute.Int64("sluice.new_packs", int64(res.Snapshot.NewPacks)), attribute.String("messaging.system", "nats"))
	if res.Snapshot.NewPacks > 0 && span.IsRecording() {
		// The snapshot merges many packs' traces: link to each flush that
		// wrote one (bounded), so every batch's trace reaches the publisher.
		traces, err := p.cat.PackTraces(ctx, res.Snapshot.Version, res.Snapshot.PublishID, maxLinks)
		if err != nil {
			p.log.Warn("reading the packs' traces for span links", "error", err)
		}
		for _, tp := range traces {
			sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
			if sc.IsValid() {
				span.AddLink(trace.Link{SpanContext: sc})
			}
		}
	}
	p.update(func(s *Status) {
		s.LatestVersion, s.ThroughLSN = res.Snapshot.Version, res.Snapshot.Through
		s.LastPublish, s.LastPublishMs = time.Now(), float64(d.Microseconds())/1000
		s.Publishes++
		s.LeaseTerm, s.LastError = res.Lease.Term, ""
	})
	return res, nil
}

// expireEvery is how often the active publisher advances the snapshot
// expiry horizon (expire).
const expireEvery = 10 * time.Second

// expire advances the expiry horizon (catalog.AdvanceRetention: fenced on
// the lease, only upwards) from catalog.snapshot_retention and
// catalog.snapshot_retain_min, at most every expireEvery; only the lease
// holder does it. Nothing is deleted: expired snapshots stop being read
// and listed.
func (p *Publisher) expire(ctx context.Context, l catalog.Lease) {
	if !p.expiredAt.IsZero() && time.Since(p.expiredAt) < p.expireEvery {
		return
	}
	p.expiredAt = time.Now()
	h, err := p.cat.AdvanceRetention(ctx, l, catalog.RetentionPolicy{Retention: p.cfg.Catalog.SnapshotRetention, RetainMin: p.cfg.Catalog.SnapshotRetainMin})
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("advancing snapshot retention", "err", err)
		}
		return
	}
	p.update(func(s *Status) { s.ExpiryHorizon = h })
}

// trimEvery is how often the active publisher trims the data streams.
const trimEvery = 10 * time.Second

// trim purges the acknowledged prefix of CHANGES, ROUTED and PACKS (see
// natsx.Trim), at most every trimEvery; only the lease holder does it.
func (p *Publisher) trim(ctx context.Context) {
	if time.Since(p.trimmedAt) < trimEvery {
		return
	}
	p.trimmedAt = time.Now()
	flushers := make([]string, p.cfg.Delivery.Partitions)
	for i := range flushers {
		flushers[i] = proto.ConsumerFlusher(i)
	}
	for _, t := range []struct {
		stream   string
		required []string
	}{
		{proto.StreamChanges, []string{proto.ConsumerRouter}},
		{proto.StreamRouted, flushers},
		{proto.StreamPacks, []string{proto.ConsumerIndexer}},
	} {
		n, err := natsx.Trim(ctx, p.deps.JS, t.stream, t.required)
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("trimming stream", "stream", t.stream, "err", err)
			}
			continue
		}
		p.trimmed.WithLabelValues(t.stream).Add(float64(n))
	}
}
