package reader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
	"github.com/sluice-cdc/sluice/services/reader/internal/capture"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/pgtypes"
	"github.com/sluice-cdc/sluice/shared/state"
)

// Deps are what the reader needs from its process.
type Deps struct {
	JS      jetstream.JetStream
	Log     *slog.Logger
	Metrics prometheus.Registerer
	// State is the pool of the state database (leases, backfill and halt
	// records); nil opens one from cfg.StateDSN().
	State *pgxpool.Pool
	// Holder names this replica in the lease; default host-pid-random.
	Holder string
	// Mem is the Arrow allocator (default memory.DefaultAllocator).
	Mem memory.Allocator
	// Packs is the pack store that holds values carried by reference
	// (reader.max_inline_value); nil opens the one the config names.
	Packs packstore.Store
}

// Reader is the reader service component.
type Reader struct {
	cfg     config.Config
	deps    Deps
	log     *slog.Logger
	metrics *capture.Metrics
	state   *capture.State
	resync  *capture.Resyncer
	holder  string

	mu    sync.Mutex
	lease state.Lease
	held  bool

	rules rules // every rule on unless a sluice_unsafe build's switch is set

	holds resyncHolds // rows only a resync carries (holds.go)
	// schemaChecked is the source WAL position read before the last
	// periodic schema check that went through every table (checkSchemas).
	schemaChecked atomic.Uint64
	// schemaSeen: tables whose schema change the last periodic check saw
	// and left to the stream's Relation message (checkSchemas).
	schemaSeen map[string]bool
	// pubGood is the source position read before the last check that found
	// the publication right (publication.go): a halt for it is at pubGood.
	// Written at start and then by the periodic check only.
	pubGood proto.LSN
	// pubResyncs are the resyncs a repair of the publication left to
	// queue, by table (the periodic check's own).
	pubResyncs map[string]string
	// sessionCancel ends the running replication session (under mu).
	sessionCancel context.CancelFunc
	// failover is the last failover check (pollFailover); failoverPrev the
	// one before the current capture started or the slot was found gone,
	// which explains a slot_lost (noteSlotLost); slotLost the last one.
	failover     atomic.Pointer[source.Failover]
	failoverPrev *source.Failover
	slotLost     atomic.Pointer[slotLostNote]
	// captured: a capture got as far as streaming once in this process
	// (a standby found afterwards is a failover under way, not bad config).
	captured atomic.Bool
	// pri is the pool on the server the reader writes to (the publication,
	// resync watermarks): source.primary_dsn's when set, else nil (the
	// source pool itself; writer). standby: source.dsn reaches a hot
	// standby (docs/adr/0045-standby-decoding.md). Both are set by capture
	// before it starts its goroutines and stay for its lifetime.
	pri     *pgxpool.Pool
	standby bool
	// flushMarks: resync marks are written with flush = true (Postgres
	// 17+, on a standby source): the standby receives a mark once it is
	// flushed, and a non-transactional message alone waits for the WAL
	// writer (up to wal_writer_delay) otherwise.
	flushMarks bool
	// replay is the standby's last replay check (pollStandby), for the
	// status; nil when the source is a primary.
	replay atomic.Pointer[StandbyStatus]

	// test knobs (unexported; the tests in this package flip them)
	publishHook func(capture.PublishFunc) capture.PublishFunc
	onConfirm   func(proto.LSN)
	noRelease   bool          // a "killed" reader leaves its lease to expire
	noFetchWait bool          // TOAST reads do not wait for the change to be visible
	pollEvery   time.Duration // the retained-WAL and dropped-table poll (default 10s)
	schemaEvery time.Duration // the periodic schema check (default 1s)
	resyncPoll  time.Duration // the resync queue poll (default 1s)
	// beforeHighWatermark runs between a resync chunk's SELECT and its HW
	// (a test changes a row of the chunk inside the window there).
	beforeHighWatermark func(table string, rows [][][]byte)
	afterChunk          func(id, chunks int64) // after a chunk is persisted
	lastSchema          *batch.Schema          // of the resync's last chunk (the resync worker's own)
}

// New checks the configuration and returns a reader; Run starts it.
func New(cfg config.Config, deps Deps) (*Reader, error) {
	if cfg.Source.DSN == "" {
		return nil, fmt.Errorf("%w: source.dsn is empty", ErrConfig)
	}
	if len(cfg.Source.Tables) == 0 {
		return nil, fmt.Errorf("%w: source.tables is empty", ErrConfig)
	}
	if deps.JS == nil {
		return nil, fmt.Errorf("%w: no JetStream context", ErrConfig)
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Mem == nil {
		deps.Mem = memory.DefaultAllocator
	}
	holder := deps.Holder
	if holder == "" {
		h, _ := os.Hostname()
		holder = fmt.Sprintf("%s-%d-%s", h, os.Getpid(), uuid.NewString()[:8])
	}
	r := &Reader{cfg: cfg, deps: deps, log: deps.Log.With("service", "reader", "slot", cfg.Source.Slot),
		metrics: capture.NewMetrics(deps.Metrics), state: capture.NewState(), resync: capture.NewResyncer(), holder: holder}
	r.schemaSeen = map[string]bool{}
	r.pubResyncs = map[string]string{}
	r.rules = unsafeRules(r.log)
	r.resync.NoHighWatermarkCheckForTest = r.rules.noHighWatermark
	return r, nil
}

func (r *Reader) leaseName() string { return "reader/" + r.cfg.Source.Slot }

// Run waits for the slot's lease, then captures until ctx ends or the lease
// is lost (then it waits again). It returns nil on a clean shutdown.
func (r *Reader) Run(ctx context.Context) error {
	pool := r.deps.State
	if pool == nil {
		p, err := pgxpool.New(ctx, r.cfg.StateDSN())
		if err != nil {
			return fmt.Errorf("connecting to the state database: %w", err)
		}
		defer p.Close()
		pool = p
	}
	if err := state.Migrate(ctx, pool, r.cfg.State.Schema); err != nil {
		return fmt.Errorf("migrating the state schema: %w", err)
	}
	if err := migrate(ctx, pool, r.cfg.State.Schema); err != nil {
		return err
	}
	leases := state.NewLeases(pool, r.cfg.State.Schema)
	ttl := r.cfg.Reader.LeaseTTL
	r.state.SetPhase("standby")
	attempt := 0
	for ctx.Err() == nil {
		l, ok, err := leases.Acquire(ctx, r.leaseName(), r.holder, ttl)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("acquiring the reader lease", "error", err)
		}
		if !ok {
			if !natsx.Sleep(ctx, ttl/3) {
				break
			}
			continue
		}
		r.log.Info("reader lease acquired: active", "holder", r.holder, "term", l.Term)
		r.setLease(l, true)
		err = r.active(ctx, pool, leases, l)
		r.setLease(state.Lease{}, false)
		r.state.SetPhase("standby")
		if ctx.Err() != nil && r.noRelease {
			break
		}
		if ctx.Err() != nil {
			// Release so a standby takes over at once on a clean shutdown.
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = leases.Release(rctx, l)
			cancel()
			break
		}
		if errors.Is(err, ErrLeaseLost) {
			r.log.Error("reader lease lost: stopped streaming", "error", err)
			continue
		}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = leases.Release(rctx, l)
		cancel()
		if errors.Is(err, source.ErrInvalidSource) {
			r.state.SetError(err)
			return err // the operator must act: the message says what to run
		}
		if err != nil {
			attempt++
			d := natsx.Backoff(attempt)
			r.state.SetError(err)
			r.log.Error("capture failed: retrying", "error", err, "retry_in", d.String())
			if !natsx.Sleep(ctx, d) {
				break
			}
		}
	}
	return nil
}

func (r *Reader) setLease(l state.Lease, held bool) {
	r.mu.Lock()
	r.lease, r.held = l, held
	r.mu.Unlock()
}

// active runs capture under the lease, renewing it; losing it cancels
// capture at once.
func (r *Reader) active(ctx context.Context, pool *pgxpool.Pool, leases *state.Leases, l state.Lease) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		ttl := r.cfg.Reader.LeaseTTL
		renewed := time.Now()
		for natsx.Sleep(gctx, ttl/3) {
			nl, err := leases.Renew(gctx, l, ttl)
			if err != nil {
				if gctx.Err() != nil {
					return nil
				}
				if errors.Is(err, state.ErrLeaseLost) {
					return fmt.Errorf("%w: %w", ErrLeaseLost, err)
				}
				// A failed round trip: keep trying while the lease may still
				// be live; give up before it can have expired.
				if time.Since(renewed) > ttl*2/3 {
					return fmt.Errorf("%w: no successful renewal for %s: %w", ErrLeaseLost, time.Since(renewed).Round(time.Millisecond), err)
				}
				r.log.Warn("renewing the reader lease", "error", err)
				continue
			}
			renewed = time.Now()
			l = nl
			r.setLease(l, true)
		}
		return nil
	})
	g.Go(func() error {
		err := r.capture(gctx, pool)
		if err == nil && ctx.Err() == nil && gctx.Err() == nil {
			err = errors.New("capture ended")
		}
		return err
	})
	return g.Wait()
}

// runtimeParams are the session settings pgtypes.AppendText reads.
var runtimeParams = map[string]string{
	"DateStyle": "ISO", "TimeZone": "UTC", "IntervalStyle": "postgres",
	"bytea_output": "hex", "extra_float_digits": "3",
}

// replicationConn opens a replication connection to the source.
func (r *Reader) replicationConn(ctx context.Context) (*pgconn.PgConn, error) {
	cc, err := r.connConfig(true)
	if err != nil {
		return nil, err
	}
	conn, err := pgconn.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("opening a replication connection to the source: %w", err)
	}
	return conn, nil
}

func (r *Reader) connConfig(replication bool) (*pgconn.Config, error) {
	c, err := pgconn.ParseConfig(r.cfg.Source.DSN)
	if err != nil {
		return nil, fmt.Errorf("parsing source.dsn: %w", err)
	}
	for k, v := range runtimeParams {
		c.RuntimeParams[k] = v
	}
	if replication {
		c.RuntimeParams["replication"] = "database"
		c.RuntimeParams["application_name"] = "sluice-reader"
	}
	return c, nil
}

func (r *Reader) dsnWithParams() string { return withParams(r.cfg.Source.DSN) }

// withParams adds the session settings pgtypes.AppendText reads to a DSN.
func withParams(dsn string) string {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		// keyword/value form (host=a,b dbname=app ...): unknown keywords
		// are run-time parameters.
		return dsn + " DateStyle=ISO TimeZone=UTC IntervalStyle=postgres bytea_output=hex extra_float_digits=3"
	}
	sep := "?"
	for i := 0; i < len(dsn); i++ {
		if dsn[i] == '?' {
			sep = "&"
		}
	}
	return dsn + sep + "DateStyle=ISO&TimeZone=UTC&IntervalStyle=postgres&bytea_output=hex&extra_float_digits=3"
}

// capture validates the source, backfills when due, and streams, restarting
// the session from the confirmed LSN after any failure.
func (r *Reader) capture(ctx context.Context, statePool *pgxpool.Pool) error {
	src, err := pgxpool.New(ctx, r.dsnWithParams())
	if err != nil {
		return fmt.Errorf("connecting to the source: %w", err)
	}
	defer src.Close()
	if err := natsx.EnsureStreams(ctx, r.deps.JS, r.cfg); err != nil {
		return err
	}
	ver, err := source.CheckServerVersion(ctx, src)
	if err != nil {
		return err
	}
	r.log.Info("source server", "version", ver.Text)
	pri, err := r.openPrimary(ctx)
	if err != nil {
		return err
	}
	if pri != nil {
		defer pri.Close()
	}
	r.pri, r.standby, r.flushMarks = nil, false, false
	standby, err := source.CheckRole(ctx, src, ver, querier(pri))
	if err != nil {
		if r.captured.Load() && pri == nil && standby && errors.Is(err, source.ErrInvalidSource) {
			// It captured from a primary before: a failover under way (a
			// host name that follows the primary, still on the old one).
			// Retried with backoff; the status shows the message.
			return fmt.Errorf("the source is a standby now, retrying: %s", err.Error())
		}
		return err
	}
	r.pri, r.standby = pri, standby
	r.flushMarks = standby && ver.Major() >= 17
	r.replay.Store(nil)
	if standby {
		r.log.Info("decoding from a standby: writes go to the primary", "primary", hostOf(r.cfg.Source.PrimaryDSN))
	}
	if err := source.CheckWALLevel(ctx, src); err != nil {
		return err
	}
	tables := map[string]source.Table{}
	var list []source.Table
	for _, name := range r.cfg.Source.Tables {
		t, err := source.Describe(ctx, src, name, r.cfg.Source.RoutingColumnOf(name))
		if err != nil {
			return err
		}
		if err := checkRoutingKind(ctx, src, t); err != nil {
			return err
		}
		tables[name] = t
		list = append(list, t)
	}
	ens, err := r.ensurePublication(ctx, src, statePool)
	if err != nil {
		return err
	}
	if err := source.CheckGeneratedNotPublished(ctx, src, r.cfg.Source.Publication, ver); err != nil {
		return err
	}
	copyOnly, err := r.backfillAdded(ctx, src, statePool, ens.Added, "added")
	if err != nil {
		return err
	}
	if _, err := r.backfillAdded(ctx, src, statePool, ens.Repaired, ReasonPublication); err != nil {
		return err
	}
	halts, haltsAt, err := loadHalts(ctx, statePool, r.cfg.State.Schema, r.cfg.Source.Slot)
	if err != nil {
		return err
	}
	for t, reason := range halts {
		if at, ok := haltsAt[t]; ok {
			r.state.SetHaltedAt(t, at)
		}
		r.state.SetHalted(t, reason)
		r.metrics.Halted.WithLabelValues(t, "persisted").Set(1)
	}
	queue, err := state.NewResyncs(statePool, r.cfg.State.Schema).List(ctx, r.cfg.Source.Slot, 1000)
	if err != nil {
		return err
	}
	configured := map[string]bool{}
	for _, t := range r.cfg.Source.Tables {
		configured[t] = true
	}
	r.holds.load(queue, configured)
	recovered, err := loadRecovered(ctx, statePool, r.cfg.State.Schema, r.cfg.Source.Slot)
	if err != nil {
		return err
	}
	for t, rh := range recovered {
		if halts[t] == "" {
			r.state.SetRecovered(t, rh)
		}
	}
	claim, err := r.claimFunc(ctx)
	if err != nil {
		return err
	}
	reads := source.NewReads(src, r.metrics.FetchWaits, r.log)
	reads.NoFetchWaitForTest = r.noFetchWait
	opts := &capture.Options{
		Slot: r.cfg.Source.Slot, Publication: r.cfg.Source.Publication, Tables: tables,
		BatchRows: r.cfg.Reader.BatchRows, BatchBytes: int(r.cfg.Reader.BatchBytes), MaxPayload: int(r.cfg.NATS.MaxPayload),
		BatchInterval: r.cfg.Reader.BatchInterval, StatusInterval: r.cfg.Reader.StatusInterval,
		AckWait: r.cfg.Reader.AckWait, MaxInFlight: r.cfg.Reader.MaxInFlight,
		MaxInline: r.maxInline(), Claim: claim,
		Mem: r.deps.Mem, Append: pgtypes.AppendText,
		Resolve:           reads.Resolve,
		Fetch:             reads.Fetch,
		DescribeGenerated: reads.DescribeGenerated,
		Eval:              reads.Eval,
		ColumnNums: func(ctx context.Context, relid uint32) (capture.ColumnNums, error) {
			return reads.ColumnNums(ctx, relid)
		},
		HasDefault: reads.HasDefault,
		AutoResync: r.autoResyncFunc(statePool),
		Halt: func(ctx context.Context, table, reason string, at proto.LSN) error {
			return saveHalt(ctx, statePool, r.cfg.State.Schema, r.cfg.Source.Slot, table, reason, at)
		},
		Publish: r.deps.JS.PublishMsgAsync, Resync: r.resync, Log: r.log, Metrics: r.metrics,
		Tracer: otel.Tracer("github.com/sluice-cdc/sluice/services/reader"), State: r.state,
		ScalarMaxForTest: r.rules.scalarMax, UnchainedForTest: r.rules.unchained, OnConfirm: r.onConfirm,
		Protocol: r.cfg.Source.Protocol, SpillDir: r.cfg.ReaderSpillDir(), ReplayAbortedForTest: r.rules.replayAborted,
	}
	if r.publishHook != nil {
		opts.Publish = r.publishHook(opts.Publish)
	}
	savedKinds, err := loadKinds(ctx, statePool, r.cfg.State.Schema, r.cfg.Source.Slot)
	if err != nil {
		return err
	}
	opts.Kinds = capture.NewKnownKinds(savedKinds, func(ctx context.Context, table string, k capture.Kinds) error {
		return saveKinds(ctx, statePool, r.cfg.State.Schema, r.cfg.Source.Slot, table, k)
	})
	if err := startKinds(ctx, src, opts.Kinds, savedKinds, list, opts); err != nil {
		return err
	}
	if r.rules.noKnownKinds {
		opts.Kinds = nil
	}

	r.failoverPrev = r.failover.Load() // before this start: why a slot is gone (noteSlotLost)
	g, gctx := errgroup.WithContext(ctx)
	if standby {
		g.Go(func() error { return r.pollStandby(gctx, src) })
	} else {
		g.Go(func() error { r.pollFailover(gctx, src); return nil })
	}
	g.Go(func() error { r.pollRetained(gctx, src, list, opts); return nil })
	g.Go(func() error { r.pollSchemas(gctx, src, list, opts); return nil })
	g.Go(func() error {
		if err := r.prepareSlot(gctx, src, statePool, list, copyOnly, opts); err != nil {
			return err
		}
		r.captured.Store(true)
		g.Go(func() error { r.resyncLoop(gctx, src, statePool, tables, opts); return nil })
		for {
			err := r.stream(gctx, src, opts)
			if !errors.Is(err, errSlotLost) {
				return err
			}
			// Dropped mid-stream: created again and every table copied
			// (prepareSlot sees it gone after a finished backfill).
			r.failoverPrev = r.failover.Load()
			if err := r.prepareSlot(gctx, src, statePool, list, nil, opts); err != nil {
				return err
			}
		}
	})
	return g.Wait()
}

// maxInline is the largest value a row carries inline: reader.max_inline_value,
// at most a quarter of nats.max_payload.
func (r *Reader) maxInline() int {
	return int(min(r.cfg.Reader.MaxInlineValue, r.cfg.NATS.MaxPayload/4))
}

// claimFunc opens the pack store for values carried by reference (nil when
// reader.max_inline_value is 0).
func (r *Reader) claimFunc(ctx context.Context) (capture.ClaimFunc, error) {
	if r.maxInline() <= 0 {
		return nil, nil
	}
	store := r.deps.Packs
	if store == nil {
		var err error
		if store, err = packstore.OpenConfig(ctx, r.cfg); err != nil {
			return nil, fmt.Errorf("opening the pack store for values carried by reference: %w", err)
		}
	}
	cs, ok := store.(packstore.ClaimStore)
	if !ok {
		return nil, fmt.Errorf("the pack store %T cannot hold values carried by reference: set reader.max_inline_value: 0 (a row over nats.max_payload then halts its table)", store)
	}
	return cs.PutClaim, nil
}

// stream runs replication sessions until ctx ends, each from the slot's
// confirmed LSN.
func (r *Reader) stream(ctx context.Context, src *pgxpool.Pool, opts *capture.Options) error {
	attempt := 0
	for ctx.Err() == nil {
		err := r.session(ctx, src, opts)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			attempt = 0
			continue
		}
		var invalid bool
		if errors.Is(err, source.ErrInvalidSource) || errors.Is(err, errSlotLost) {
			invalid = true
		}
		r.state.SetError(err)
		if invalid {
			return err
		}
		attempt++
		r.metrics.Restarts.Inc()
		d := natsx.Backoff(attempt)
		r.log.Error("replication session ended: restarting from the confirmed LSN", "error", err, "retry_in", d.String())
		r.state.SetPhase("restarting")
		if !natsx.Sleep(ctx, d) {
			return nil
		}
	}
	return nil
}

func (r *Reader) session(ctx context.Context, src *pgxpool.Pool, opts *capture.Options) error {
	sl, err := source.LookupSlot(ctx, src, r.cfg.Source.Slot)
	if err != nil {
		return err
	}
	if !sl.Exists {
		return fmt.Errorf("%w: replication slot %s", errSlotLost, r.cfg.Source.Slot)
	}
	if sl.Active && sl.ActivePID != 0 {
		// We hold the lease, so the walsender still on the slot serves a
		// reader that lost it (a dead host's connection lingers until
		// wal_sender_timeout): end it rather than wait.
		r.log.Warn("replication slot still in use by a previous reader: terminating its walsender", "pid", sl.ActivePID)
		if _, err := src.Exec(ctx, "SELECT pg_terminate_backend($1)", sl.ActivePID); err != nil {
			r.log.Warn("terminating the previous walsender", "error", err)
		}
	}
	r.ensureFailover(ctx, src)
	conn, err := r.replicationConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	sctx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	r.sessionCancel = cancel
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.sessionCancel = nil
		r.mu.Unlock()
		cancel()
	}()
	_, err = capture.Stream(sctx, conn, sl.ConfirmedFlush, opts)
	if err != nil && ctx.Err() == nil && sctx.Err() != nil {
		return nil // restartSession: the next session starts at once
	}
	return err
}

// checkRoutingKind refuses a routing column the router cannot route by:
// it routes by integers and by text forms (text, varchar, char, uuid,
// numeric, enums and the other types that travel as text), not by
// booleans, floats, dates, timestamps, bytea or arrays.
func checkRoutingKind(ctx context.Context, src *pgxpool.Pool, t source.Table) error {
	kind, pgType, err := pgtypes.ResolveColumn(ctx, src, t.OID, t.Routing)
	if err != nil {
		return fmt.Errorf("resolving the routing column %s of %s: %w", t.Routing, t.Name, err)
	}
	at, err := kind.ArrowType()
	if err != nil {
		return fmt.Errorf("resolving the routing column %s of %s: %w", t.Routing, t.Name, err)
	}
	switch at.ID() {
	case arrow.INT16, arrow.INT32, arrow.INT64, arrow.STRING:
		return nil
	}
	return fmt.Errorf("%w: table %s: routing column %s is %s; sluice routes by integer, text, varchar, char, uuid, numeric or enum columns: set source.routing_columns.%s to the column that names the tenant",
		source.ErrInvalidSource, t.Name, t.Routing, pgType, t.Name)
}
