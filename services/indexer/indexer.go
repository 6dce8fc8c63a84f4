package indexer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// Deps is what the indexer needs.
type Deps struct {
	JS      jetstream.JetStream
	Log     *slog.Logger
	Metrics prometheus.Registerer
	Catalog catalog.Conn
	Packs   packstore.Store
}

// Status is the indexer's state for `sluice status`.
type Status struct {
	Packs         int64     `json:"packs_indexed"`
	Rows          int64     `json:"rows_indexed"`
	Batches       int64     `json:"batches"`
	DeadLettered  int64     `json:"dead_lettered"`
	LastBatch     time.Time `json:"last_batch,omitempty"`
	LastBatchMs   float64   `json:"last_batch_ms"`
	Reconciled    int64     `json:"reconciled_packs"`
	LastReconcile time.Time `json:"last_reconcile,omitempty"`
	LastError     string    `json:"last_error,omitempty"`
}

// Indexer is the indexer component.
type Indexer struct {
	cfg  config.Config
	deps Deps
	log  *slog.Logger
	cat  *catalog.Catalog
	dlq  *natsx.DeadLetter
	// settler settles the events of the batches the indexer acks itself
	// (Consume settles the events it checks).
	settler *natsx.Settler
	queue   chan item
	m       metrics
	// indexBatch indexes one batch of the batcher (flush; tests replace it).
	indexBatch func(ctx context.Context, batch []item)

	// indexMu serializes Index calls of the batcher and the reconciler in
	// this process, so one does not re-insert what the other is indexing
	// (harmless, but wasted work). Lock order: indexMu before mu.
	indexMu sync.Mutex
	mu      sync.Mutex // guards status and bad
	status  Status
	bad     map[string]bool // paths the reconciler already dead-lettered
	// badLoaded: bad holds the files the DLQ already names
	// (loadDeadLettered; only the reconciler goroutine touches it).
	badLoaded bool
	// suspects are the paths the last reconcile pass found missing from
	// the inventory (only the reconciler goroutine touches it).
	suspects map[string]bool
	// lastClean is when the reconciler last removed stale temporary files.
	lastClean time.Time
	// legacyListed: a pass listed the per-destination pack layout;
	// segmentsHW is the latest segment time a pass listed (reconcile.go,
	// segmentsAfter). Only the reconciler goroutine touches them.
	legacyListed bool
	segmentsHW   time.Time
}

// item is one pack waiting in the batch, with the event to ack (nil when
// the reconciler found it).
// AckWait is the PACKS consumer's: an event a dead indexer held comes back
// this long after its last delivery or in-progress ack, and the publisher's
// frontier waits for it (ARCHITECTURE.md, "Recovery after a crash"). An
// event being checked or indexed is kept alive with in-progress acks every
// AckWait/3; one redelivered while queued behind a slow batch is indexed
// again, which is harmless (catalog.Index skips indexed packs, and rows
// fold onto themselves).
const AckWait = 15 * time.Second

type item struct {
	ref    catalog.PackRef
	msg    jetstream.Msg
	queued time.Time // when it was checked and queued for the batcher
}

type metrics struct {
	packs, rows, dead, reconciled prometheus.Counter
	batch                         prometheus.Histogram
}

// New returns an indexer; Run starts it.
func New(cfg config.Config, deps Deps) (*Indexer, error) {
	if deps.JS == nil || deps.Catalog == nil || deps.Packs == nil {
		return nil, errors.New("creating indexer: JS, Catalog and Packs are required")
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	log := deps.Log.With("service", "indexer")
	ix := &Indexer{
		cfg:  cfg,
		deps: deps,
		log:  log,
		cat: catalog.New(deps.Catalog, catalog.Options{Prefix: cfg.Catalog.Prefix, Log: log, Limits: catalog.IndexLimits{
			MaxMemory: int64(cfg.Indexer.MaxMemory), MaxTime: cfg.Indexer.MaxStatementTime,
		}}),
		dlq:   natsx.NewDeadLetter(deps.JS, "indexer"),
		queue: make(chan item, 1024),
		bad:   map[string]bool{},
	}
	ix.settler = natsx.NewSettler(natsx.SettleOptions{Stage: "indexer", DLQ: ix.dlq, Log: log})
	ix.indexBatch = ix.flush
	reg := deps.Metrics
	ix.m = metrics{
		packs:      telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_indexer_packs_total", Help: "Packs indexed into the catalog."})),
		rows:       telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_indexer_rows_total", Help: "Rows indexed into the catalog."})),
		dead:       telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_indexer_dead_letters_total", Help: "Packs dead-lettered (corrupt or mismatched)."})),
		reconciled: telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_indexer_reconciled_packs_total", Help: "Packs the reconciler found missing from the inventory."})),
		batch: telemetry.MustRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_indexer_batch_seconds", Help: "Time to index one batch of packs.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)})),
	}
	return ix, nil
}

// Catalog returns the catalog the indexer writes.
func (ix *Indexer) Catalog() *catalog.Catalog { return ix.cat }

// Status returns a snapshot of the indexer's state.
func (ix *Indexer) Status() Status {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.status
}

func (ix *Indexer) setErr(err error) {
	ix.mu.Lock()
	if err != nil {
		ix.status.LastError = err.Error()
	} else {
		ix.status.LastError = ""
	}
	ix.mu.Unlock()
}

// Run checks the catalog schema, then consumes PACKS, batches, indexes and
// reconciles until ctx ends. It returns nil on a clean shutdown.
func (ix *Indexer) Run(ctx context.Context) error {
	if err := ix.cat.EnsureSchema(ctx); err != nil {
		return fmt.Errorf("starting indexer: %w", err)
	}
	cons, err := ix.deps.JS.CreateOrUpdateConsumer(ctx, proto.StreamPacks, jetstream.ConsumerConfig{
		Durable:       proto.ConsumerIndexer,
		FilterSubject: proto.SubjectPacksAll,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       AckWait,
		MaxAckPending: 4096,
		MaxDeliver:    -1,
	})
	if err != nil {
		return fmt.Errorf("starting indexer: creating consumer %s: %w", proto.ConsumerIndexer, err)
	}
	ix.log.Info("indexer started", "store", ix.deps.Packs.ID(), "batch_rows", ix.cfg.Indexer.BatchRows, "batch_wait", ix.cfg.Indexer.BatchWait)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return natsx.Consume(gctx, cons, ix.handle, natsx.ConsumeOptions{
			Stage: "indexer", DLQ: ix.dlq, Fetch: 256, MaxWait: time.Second, ManualAck: true,
			Log: ix.log, Metrics: ix.deps.Metrics, InProgressEvery: AckWait / 3,
		})
	})
	g.Go(func() error { return ix.batcher(gctx) })
	g.Go(func() error { return ix.reconciler(gctx) })
	err = g.Wait()
	ix.log.Info("indexer stopped")
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// handle checks one pack event and queues its pack for the batcher. It
// returns a permanent error for a bad event or a pack that disagrees with
// it (dead-lettered by Consume).
func (ix *Indexer) handle(ctx context.Context, msg jetstream.Msg) error {
	ref, err := ix.check(ctx, msg)
	if err != nil {
		if errors.Is(err, packstore.ErrCorruptPack) || errors.Is(err, catalog.ErrPackMismatch) || errors.Is(err, arrowcodec.ErrDecode) ||
			errors.Is(err, proto.ErrWireVersion) || errors.Is(err, packstore.ErrBadPath) || errors.Is(err, errBadEvent) {
			ix.m.dead.Inc()
			ix.mu.Lock()
			ix.status.DeadLettered++
			ix.mu.Unlock()
			return natsx.Permanent(natsx.WithHeaders(err, haltHeaders(msg)))
		}
		return err
	}
	select {
	case ix.queue <- item{ref: ref, msg: msg, queued: time.Now()}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errBadEvent = errors.New("bad pack event")

// haltHeaders are the headers of a pack event's dead letter that make it a
// halt of the pack's destinations (docs/adr/0034-corrupt-pack-halts.md):
// the table, the pack's path, its first and last positions, and the count
// and hash of the destinations it names (their names stay in the dead
// letter's body, the event itself). What the event does not give is left
// out (an undecodable event: none of them).
func haltHeaders(msg jetstream.Msg) nats.Header {
	h := nats.Header{}
	ev, err := decodeEvent(msg)
	if err != nil {
		if t := msg.Headers().Get(proto.HeaderTable); t != "" {
			h.Set(proto.HeaderTable, t)
		}
		return h
	}
	h.Set(proto.HeaderTable, ev.table)
	h.Set(proto.HeaderPackPath, ev.path)
	if ev.first != "" {
		h.Set(proto.HeaderFirst, ev.first)
	}
	if ev.last != "" {
		h.Set(proto.HeaderLast, ev.last)
	}
	dests := ev.destinations
	if len(dests) == 1 && dests[0] == "" {
		dests = nil // the reconciler's dead letter of a segment, replayed
	}
	h.Set(proto.HeaderHaltDestinations, strconv.Itoa(len(dests)))
	if len(dests) > 0 {
		h.Set(proto.HeaderHaltDestinationsHash, proto.DestinationsHash(dests))
	}
	if len(dests) == 1 {
		h.Set(proto.HeaderDestination, dests[0])
	}
	return h
}

// event is a decoded pack event: a per-destination pack's (one row, on
// proto.PacksSubject(destination)) or a segment's (one row per
// destination it holds, in row order, on proto.SegmentEventSubject(table)).
type event struct {
	packID, storeID, table, path string
	segment                      bool
	destinations                 []string // one per row
	rows                         []int64  // one per row; 0: not given
	// first and last are the lowest first and highest last position of
	// the rows ("": not given, as in the reconciler's dead letters).
	first, last string
}

func decodeEvent(msg jetstream.Msg) (event, error) {
	if err := proto.CheckWire(msg.Headers().Get(proto.HeaderWire)); err != nil {
		return event{}, err
	}
	rec, err := arrowcodec.Decode(msg.Data(), memory.DefaultAllocator)
	if err != nil {
		return event{}, fmt.Errorf("decoding pack event: %w", err)
	}
	defer rec.Release()
	// The subject says which: a segment's names its table (two tokens),
	// a pack's its destination (one).
	suffix, _ := strings.CutPrefix(msg.Subject(), "sluice.packs.")
	ev := event{segment: strings.Contains(suffix, ".")}
	n := int(rec.NumRows())
	if n < 1 || !ev.segment && n != 1 {
		return event{}, fmt.Errorf("%w: %d rows, want 1 (a segment's event: at least 1)", errBadEvent, n)
	}
	str := func(name string) (*array.String, error) {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) != 1 {
			return nil, fmt.Errorf("%w: no %s column", errBadEvent, name)
		}
		col, ok := rec.Column(idx[0]).(*array.String)
		if !ok || col.NullN() > 0 {
			return nil, fmt.Errorf("%w: %s is not a string", errBadEvent, name)
		}
		return col, nil
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"pack_id", &ev.packID}, {"store_id", &ev.storeID}, {"table", &ev.table}, {"path", &ev.path}} {
		col, err := str(f.name)
		if err != nil {
			return event{}, err
		}
		*f.dst = col.Value(0)
		for i := 1; i < n; i++ {
			if col.Value(i) != *f.dst {
				return event{}, fmt.Errorf("%w: row %d names %s %q, row 0 %q", errBadEvent, i, f.name, col.Value(i), *f.dst)
			}
		}
	}
	dest, err := str("destination")
	if err != nil {
		return event{}, err
	}
	var rows *array.Int64
	if idx := rec.Schema().FieldIndices("rows"); len(idx) == 1 {
		rows, _ = rec.Column(idx[0]).(*array.Int64)
	}
	var lo, hi proto.Position
	for _, f := range []struct {
		name string
		pos  *string
		val  *proto.Position
		low  bool
	}{{"first", &ev.first, &lo, true}, {"last", &ev.last, &hi, false}} {
		idx := rec.Schema().FieldIndices(f.name)
		if len(idx) != 1 {
			continue
		}
		col, ok := rec.Column(idx[0]).(*array.String)
		if !ok {
			continue
		}
		for i := 0; i < n; i++ {
			p, err := proto.ParsePosition(col.Value(i))
			if !col.IsValid(i) || err != nil {
				continue
			}
			if *f.pos == "" || f.low && p.Less(*f.val) || !f.low && f.val.Less(p) {
				*f.pos, *f.val = col.Value(i), p
			}
		}
	}
	for i := 0; i < n; i++ {
		ev.destinations = append(ev.destinations, dest.Value(i))
		r := int64(0) // not given (the reconciler's dead letters give none)
		if rows != nil && rows.IsValid(i) {
			r = rows.Value(i)
		}
		ev.rows = append(ev.rows, r)
	}
	return ev, nil
}

// check decodes the event, reads the pack's footer and checks that event,
// subject, path and footer all name the same destinations, table and pack:
// a pack's one destination, or every destination of a segment in its
// footer's order (with each one's rows, when the event gives them).
func (ix *Indexer) check(ctx context.Context, msg jetstream.Msg) (catalog.PackRef, error) {
	ev, err := decodeEvent(msg)
	if err != nil {
		return catalog.PackRef{}, err
	}
	var want string
	if ev.segment {
		if subj := proto.SegmentEventSubject(ev.table); msg.Subject() != subj {
			return catalog.PackRef{}, fmt.Errorf("%w: segment event on %s names table %q", catalog.ErrPackMismatch, msg.Subject(), ev.table)
		}
		if want, err = proto.SegmentPath(ev.packID, ev.table); err != nil {
			return catalog.PackRef{}, fmt.Errorf("%w: %v", errBadEvent, err)
		}
	} else {
		subjDest, _ := strings.CutPrefix(msg.Subject(), "sluice.packs.")
		if subjDest != ev.destinations[0] {
			return catalog.PackRef{}, fmt.Errorf("%w: event on %s names destination %q", catalog.ErrPackMismatch, msg.Subject(), ev.destinations[0])
		}
		want = proto.PackPath(ev.destinations[0], ev.table, ev.packID)
	}
	if ev.storeID != ix.deps.Packs.ID() {
		return catalog.PackRef{}, fmt.Errorf("%w: event names store %q, this indexer reads store %q", catalog.ErrPackMismatch, ev.storeID, ix.deps.Packs.ID())
	}
	if err := packstore.ValidatePath(ev.path); err != nil {
		return catalog.PackRef{}, err
	}
	if want != ev.path {
		return catalog.PackRef{}, fmt.Errorf("%w: event path %s, its destination, table and id make %s", catalog.ErrPackMismatch, ev.path, want)
	}
	ref, err := ix.cat.ReadRef(ctx, ix.deps.Packs, ev.path)
	if err != nil {
		if errors.Is(err, packstore.ErrNotFound) {
			return catalog.PackRef{}, fmt.Errorf("%w: %v", errBadEvent, err)
		}
		return catalog.PackRef{}, err
	}
	m := ref.Meta
	if m.IsSegment() != ev.segment || m.Table != ev.table || m.PackID != ev.packID {
		return catalog.PackRef{}, fmt.Errorf("%w: event names %s %s/%s (segment %v), footer names %s/%s (segment %v)", catalog.ErrPackMismatch,
			ev.packID, ev.destinations, ev.table, ev.segment, m.PackID, m.Table, m.IsSegment())
	}
	if err := matchDestinations(ev, ref); err != nil {
		return catalog.PackRef{}, err
	}
	ref.Trace = msg.Headers().Get(proto.HeaderTraceparent)
	return ref, nil
}

// matchDestinations checks the event's destinations (and rows) against the
// footer's: a pack's destination, a segment's entries in order.
func matchDestinations(ev event, ref catalog.PackRef) error {
	m := ref.Meta
	if !m.IsSegment() {
		if m.Destination != ev.destinations[0] || ev.rows[0] > 0 && ev.rows[0] != m.Rows {
			return fmt.Errorf("%w: event names destination %s with %d rows, footer %s with %d", catalog.ErrPackMismatch, ev.destinations[0], ev.rows[0], m.Destination, m.Rows)
		}
		return nil
	}
	entries, err := ref.Entries()
	if err != nil {
		return err
	}
	if len(ev.destinations) == 1 && ev.destinations[0] == "" {
		// The reconciler's dead letter of a segment (deadLetterPath), replayed:
		// it names the segment, not its destinations; the verified footer
		// and rows say whose each row is.
		return nil
	}
	if len(entries) != len(ev.destinations) {
		return fmt.Errorf("%w: segment %s: event names %d destinations, footer %d", catalog.ErrPackMismatch, m.PackID, len(ev.destinations), len(entries))
	}
	for i, e := range entries {
		if e.Destination != ev.destinations[i] || ev.rows[i] > 0 && ev.rows[i] != e.Rows {
			return fmt.Errorf("%w: segment %s: event row %d names destination %s with %d rows, footer %s with %d", catalog.ErrPackMismatch, m.PackID, i, ev.destinations[i], ev.rows[i], e.Destination, e.Rows)
		}
	}
	return nil
}

// batcher gathers queued packs for up to batch_wait or batch_rows rows and
// indexes them together. batch_wait counts from when a batch's first pack
// was queued, not from when the batcher got to it: a pack that waited
// behind a slow batch (a segment of thousands of destinations takes
// 100-200 ms to index) is not made to wait batch_wait again, and when the
// batch closes everything queued by then joins it (up to the bounds). On
// shutdown, waiting events are naked.
func (ix *Indexer) batcher(ctx context.Context) error {
	var batch []item
	var rows, bytes int64
	var timer <-chan time.Time
	add := func(it item) (full bool) {
		batch = append(batch, it)
		rows += it.ref.Meta.Rows
		bytes += it.ref.Bytes
		return rows >= int64(ix.cfg.Indexer.BatchRows) || len(batch) >= maxBatchPacks || bytes >= maxBatchBytes
	}
	for {
		select {
		case <-ctx.Done():
			for _, it := range batch {
				if it.msg != nil {
					_ = it.msg.Nak()
				}
			}
			for {
				select {
				case it := <-ix.queue:
					if it.msg != nil {
						_ = it.msg.Nak()
					}
				default:
					return nil
				}
			}
		case it := <-ix.queue:
			if len(batch) == 0 {
				timer = time.After(max(0, ix.cfg.Indexer.BatchWait-time.Since(it.queued)))
			}
			if !add(it) {
				continue
			}
		case <-timer:
		drain:
			for {
				select {
				case it := <-ix.queue:
					if add(it) {
						break drain
					}
				default:
					break drain
				}
			}
		}
		ix.indexBatch(ctx, batch)
		batch, rows, bytes, timer = nil, 0, 0, nil
	}
}

// A batch closes at indexer.batch_rows rows, at maxBatchPacks packs or at
// maxBatchBytes of pack bytes, whichever comes first: small packs are held
// in memory until indexed (the catalog stages them into one file), so the
// count and the bytes bound the batch, not only its rows.
const (
	maxBatchPacks = 1024
	maxBatchBytes = 64 << 20
)

// flush indexes a batch and settles its events. A failed batch is retried
// pack by pack; a pack failing alone is naked with backoff.
func (ix *Indexer) flush(ctx context.Context, batch []item) {
	if len(batch) == 0 {
		return
	}
	ctx, span := otel.Tracer("github.com/sluice-cdc/sluice/services/indexer").Start(ctx, "indexer.batch")
	defer span.End()
	span.SetAttributes(attribute.Int("sluice.packs", len(batch)))
	start := time.Now()
	stop := keepAlive(batch, AckWait/3)
	defer stop()
	err := ix.index(ctx, batch)
	// A schema the catalog refuses (catalog.TableRefusedError) is its
	// table's fault: its packs are dead-lettered (halting their
	// destinations), and the rest of the batch is indexed again together,
	// so a refused table costs the others one more statement, not a retry
	// pack by pack.
	for err != nil && len(batch) > 1 {
		var refused *catalog.TableRefusedError
		if !errors.As(err, &refused) {
			break
		}
		rest := make([]item, 0, len(batch))
		for _, it := range batch {
			if it.ref.Meta.Table == refused.Table && it.ref.Meta.Schema == refused.Fingerprint {
				ix.deadLetter(context.Background(), it, err)
			} else {
				rest = append(rest, it)
			}
		}
		if len(rest) == len(batch) {
			break // names no pack of the batch: pack by pack below
		}
		batch = rest
		if len(batch) == 0 {
			return
		}
		err = ix.index(ctx, batch)
	}
	if err != nil && len(batch) > 1 {
		ix.log.Warn("indexing batch failed, retrying pack by pack", "packs", len(batch), "err", err)
		for _, it := range batch {
			if e := ix.index(ctx, []item{it}); e != nil {
				ix.retry(it, e)
			} else {
				ix.ack(it)
			}
		}
		return
	}
	if err != nil {
		ix.retry(batch[0], err)
		return
	}
	for _, it := range batch {
		ix.ack(it)
	}
	d := time.Since(start)
	ix.m.batch.Observe(d.Seconds())
	ix.mu.Lock()
	ix.status.Batches++
	ix.status.LastBatch = time.Now()
	ix.status.LastBatchMs = float64(d.Microseconds()) / 1000
	ix.mu.Unlock()
}

// keepAlive sends an in-progress ack for every event of batch each period
// until stop is called (indexing a batch can take max_statement_time and a
// retry pack by pack).
func keepAlive(batch []item, period time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, it := range batch {
					if it.msg != nil {
						_ = it.msg.InProgress()
					}
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (ix *Indexer) index(ctx context.Context, batch []item) error {
	refs := make([]catalog.PackRef, len(batch))
	for i, it := range batch {
		refs[i] = it.ref
	}
	st, err := ix.indexRefs(ctx, refs)
	if err != nil {
		ix.setErr(err)
		return err
	}
	ix.m.packs.Add(float64(st.Packs))
	ix.m.rows.Add(float64(st.Rows))
	ix.mu.Lock()
	ix.status.Packs += int64(st.Packs)
	ix.status.Rows += int64(st.Rows)
	ix.status.LastError = ""
	ix.mu.Unlock()
	return nil
}

func (ix *Indexer) ack(it item) {
	if it.msg == nil {
		return
	}
	if err := it.msg.Ack(); err != nil {
		ix.log.Warn("acking pack event failed; it will be redelivered and skipped", "pack", it.ref.Meta.PackID, "err", err)
	}
}

// indexRefs indexes refs under indexMu. A panic while indexing (the
// staging writer decodes packs in Go) is returned as a permanent error
// naming the packs: the packs were verified before, so this is a bug, but
// it costs its batch (retried pack by pack, the culprit dead-lettered),
// never the process.
func (ix *Indexer) indexRefs(ctx context.Context, refs []catalog.PackRef) (st catalog.IndexStats, err error) {
	ix.indexMu.Lock()
	defer ix.indexMu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			paths := make([]string, len(refs))
			for i, ref := range refs {
				paths[i] = ref.Path
			}
			err = fmt.Errorf("indexing %s: %w: %v", strings.Join(paths, ", "), natsx.ErrPanic, r)
			ix.log.Error("indexing panicked", "packs", len(refs), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	return ix.cat.Index(ctx, ix.deps.Packs, refs)
}

// permanent reports whether an indexing error is the pack's own and
// retrying cannot help: it is dead-lettered.
func permanent(err error) bool {
	return errors.Is(err, catalog.ErrBadSchema) || errors.Is(err, packstore.ErrCorruptPack) ||
		errors.Is(err, catalog.ErrPackMismatch) || errors.Is(err, natsx.ErrPanic)
}

func (ix *Indexer) retry(it item, err error) {
	if permanent(err) {
		ix.deadLetter(context.Background(), it, err)
		return
	}
	if it.msg == nil {
		return // the reconciler tries again next round
	}
	ix.settler.Settle(context.Background(), it.msg, err)
}

// deadLetter records a pack that cannot be indexed: its event through the
// classifier (dead letter stored, then terminated; naked with backoff if
// storing failed), a pack the reconciler found with no event by its path.
func (ix *Indexer) deadLetter(ctx context.Context, it item, reason error) {
	ix.m.dead.Inc()
	ix.mu.Lock()
	ix.status.DeadLettered++
	ix.mu.Unlock()
	if it.msg != nil {
		ix.settler.Settle(ctx, it.msg, natsx.Permanent(natsx.WithHeaders(reason, haltHeaders(it.msg))))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ix.deadLetterPath(ctx, it.ref.Path, it.ref.Bytes, reason); err != nil {
		ix.log.Error("dead-lettering pack failed", "path", it.ref.Path, "reason", reason, "err", err)
	}
}
