package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
	"github.com/sluice-cdc/sluice/services/flusher/internal/resolve"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/state"
)

var tracer = otel.Tracer("github.com/sluice-cdc/sluice/services/flusher")

// Cursors is what delivery needs of state.Cursors.
type Cursors interface {
	Advance(ctx context.Context, l state.Lease, destination string, partition int, pos proto.Position) (bool, error)
	Load(ctx context.Context, partition int) (map[string]proto.Position, error)
	LoadSome(ctx context.Context, partition int, destinations []string) (map[string]proto.Position, error)
}

// Leases is what delivery needs of state.Leases: all of its lease and
// server-clock knowledge goes through it.
type Leases interface {
	Acquire(ctx context.Context, name, holder string, ttl time.Duration) (state.Lease, bool, error)
	Renew(ctx context.Context, l state.Lease, ttl time.Duration) (state.Lease, error)
	Release(ctx context.Context, l state.Lease) error
	List(ctx context.Context, prefix string) ([]state.Lease, error)
	Held(ctx context.Context, l state.Lease) (bool, error)
	HeldMany(ctx context.Context, leases []state.Lease) (map[state.LeaseKey]bool, error)
	Now(ctx context.Context) (time.Time, error)
}

// Deps is what a Manager needs.
type Deps struct {
	JS      jetstream.JetStream
	Store   packstore.Store
	Cursors Cursors
	Leases  Leases
	Log     *slog.Logger
	Metrics prometheus.Registerer
	Mem     memory.Allocator
	// ID is this replica's holder id; empty: a random one.
	ID string
	// States, optional, are the destination lifecycle states (lifecycle.go).
	States *state.DestinationStates
}

// message is one ROUTED message as the shell holds it; its destination
// slices (items) share it. It is acked or nak'd once, when the core
// resolves it (core.Resolved).
type message struct {
	msg      jetstream.Msg
	slices   int
	buffered int           // slices buffered or in flight (counted in part.held once)
	touched  time.Time     // last ack-progress signal
	delay    time.Duration // nak delay: the longest any nak'd slice asked for
	done     bool          // acked or nak'd
	link     trace.Link    // to the span that published it (invalid: none)
}

// item is one buffered destination slice of a ROUTED message: exactly what
// a per-destination message carried (the rows of one destination, without
// proto.ColDestination), read in place: rows [lo, hi) of the message's
// decoded batch src, which every slice of the message shares (each holds
// one reference). Nothing is allocated per column of a slice: at 10,000
// destinations a slice is one or two rows, and per-slice Arrow arrays were
// a fifth of the process's CPU and most of its heap.
type item struct {
	m           *message
	dest        string
	d           *dest
	seq         uint64 // stream sequence
	delivered   uint64
	src         arrow.RecordBatch // nil once released
	lo, hi      int64
	sc          *arrow.Schema    // the slice's schema: src's without proto.ColDestination
	cols        *resolve.Columns // src's columns resolve reads, shared by the message's slices (nil: resolve finds them)
	table, fp   string
	first, last proto.Position
	rows, bytes int64
	slices      int // the message's slices (m.slices, read here by Msg without a second pointer)
}

// span is the slice's rows in place, for resolve.Plan.
func (it *item) span() resolve.Span {
	return resolve.Span{Rec: it.src, Lo: it.lo, Hi: it.hi, Cols: it.cols}
}

// release drops the slice's reference to its message batch.
func (it *item) release() {
	if it.src != nil {
		it.src.Release()
		it.src = nil
	}
}

// Msg is what the protocol core knows of the slice.
func (it *item) Msg() core.Msg {
	return core.Msg{Seq: it.seq, Delivered: it.delivered, First: it.first, Last: it.last, Slices: it.slices}
}

// dest is one destination: its protocol state in the core (live buffer,
// flush in flight, cursor, pending set, epochs, halt) and what only the
// shell needs (sizes, queueing, status). Guarded by Manager.mu.
type dest struct {
	name string
	part *part
	c    *core.Dest[*item]

	liveRows  int64
	liveBytes int64
	liveSince time.Time

	queued bool

	haltErr  error // why the core halted it
	lastErr  string
	lastPack string
	lastOK   time.Time

	lc state.DestinationState // lifecycle (lifecycle.go)

	idleSince time.Time // idle.go: when the sweep first saw it idle

	// registered: a cursor row exists for it (loaded, or written by a
	// flush), so a table-wide clear finds it after it leaves memory
	// (clear.go).
	registered bool
}

// part is one owned partition: its protocol state (lease term, lost,
// seeded, read epoch) is the core's.
type part struct {
	id        int
	subject   string // proto.RoutedPartitionSubject(id)
	lease     state.Lease
	c         *core.Partition[*item]
	checkedAt time.Time // last settle check
	// deadline is the lease's deadline on the local monotonic clock: the
	// start of the last successful acquire or renewal plus the TTL, less
	// leaseMargin (fetch.go's deadline argument). claimedAt is when the
	// acquire returned.
	deadline, claimedAt time.Time
	cons                jetstream.Consumer
	held                int // unacked messages with a slice buffered or in flight
	dests               map[string]*dest
	heldClears          []heldClear        // table-wide clears waiting for the partition to settle (clear.go)
	cancel              context.CancelFunc // stops its fetch loop
	done                chan struct{}      // closed when the fetch loop has returned
}

// Manager is the flusher engine.
type Manager struct {
	cfg config.Config
	dc  config.Delivery
	js  jetstream.JetStream
	// eventBudget bounds a segment's PACKS event: destinations' names plus
	// eventEntryCost each (groupSegments).
	eventBudget int
	store       packstore.Store
	cursors     Cursors
	leases      Leases
	log         *slog.Logger
	mem         memory.Allocator
	settler     *natsx.Settler // the classifier of messages that cannot be parsed
	id          string
	m           *metrics
	ackWait     time.Duration
	// group commit (group.go)
	commitQ chan *flushJob
	pub     *natsx.Publisher
	// segments (segment.go): this process's writer token and ordinal
	segOnce   sync.Once
	segWriter string
	segN      atomic.Uint64
	// the slices' schemas by fingerprint (receive.go internSchema)
	schemaMu sync.Mutex
	schemas  map[string]*arrow.Schema

	fetchers   sync.WaitGroup // every partition fetch loop
	mu         sync.Mutex
	cond       *sync.Cond // workers wait on it for queue entries
	dests      map[string]*dest
	held       map[*message]struct{} // messages with a slice buffered or in flight (keepAlive)
	parts      map[int]*part
	queue      []*dest
	totalBytes int64
	totalRows  int64
	stopping   bool // workers exit once the queue is empty
	rowsTarget int64
	members    int

	// lifecycle.go: states is nil without a state table (no lifecycle);
	// lc is its polled cache, set by Run.
	states *state.DestinationStates
	lc     *state.DestinationCache
	lcm    *lifecycleMetrics
	// idle.go: evicting idle destinations
	im        *idleMetrics
	lastSweep time.Time
	// due and overdue: the live buffers by start time, and those due but
	// not yet queued (due.go): the interval trigger is O(due).
	due        dueHeap
	overdue    map[*dest]time.Time
	evalVisits int64 // destinations evaluate examined (tests)
	gaugedAt   time.Time
	trace      *coreTrace // CoreTraceEnv; nil without

	// Test knobs: each switches one safety rule off (negative controls) or
	// injects a fault the real store cannot produce on demand.
	scalarMaxCursor   bool          // cursor = max flushed position, ignoring pending
	keepLiveOnFailure bool          // a failed flush keeps the live buffer
	forgetNaked       bool          // nak'd messages leave the pending set
	noEpochCheck      bool          // a fetch that raced a failure is buffered anyway
	dropRedelivered   bool          // the brief's drop rule (unsafe, see doc.go)
	noAckFence        bool          // ack without checking the lease term
	noSettle          bool          // seed a claimed partition at once (negative control of settle)
	noFetchDeadline   bool          // fetch past the local lease deadline; settle without a fetch wait
	leaseBudgetFault  time.Duration // if set, the lease budget (a renewal slower than it: a fault Postgres cannot produce on demand)
	abrupt            bool          // Run returns without draining or releasing
	noGroupCommit     bool          // every flush runs alone (runFlush): the baseline
	noPauseCheck      bool          // paused/drained destinations flush like active ones
	noFirstFlush      bool          // a new destination's first buffer waits for the interval too (the harness's default: its tests drive flushes)
	noHeldPending     bool          // a held destination's nak'd surplus leaves the pending set
	ackFirstSlice     bool          // a partition message is acked when its first slice commits
	heldNakDelay      time.Duration
	pauseFetch        atomic.Bool
	fetchPausedSeen   atomic.Bool
	ackUnwritten      bool                                    // a failed segment write counts as durable (negative control of the write rule)
	putFault          func(path string, dests []string) error // dests: the destinations the file holds, in row order
	encodeFault       func(dests []string) error              // a segment encoding failure (rows the encoder refuses cannot reach it: receive and resolve refuse them first)
	advanceFault      func(dest string) error
	beforeAck         func(dest string)
	beforeGroup       func()                      // the committer took a group's first flush, before it takes the others
	afterSegments     func(flushes, segments int) // a group's segments are encoded
	afterAdvance      func(dest string, pos proto.Position)
}

// New builds a Manager.
func New(cfg config.Config, deps Deps) (*Manager, error) {
	if deps.JS == nil || deps.Store == nil || deps.Cursors == nil || deps.Leases == nil {
		return nil, errors.New("creating flusher: JS, Store, Cursors and Leases are required")
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Metrics == nil {
		deps.Metrics = prometheus.NewRegistry()
	}
	if deps.Mem == nil {
		deps.Mem = memory.DefaultAllocator
	}
	if deps.ID == "" {
		deps.ID = newHolderID()
	}
	dc := cfg.Delivery
	m := &Manager{
		cfg: cfg, dc: dc, js: deps.JS, store: deps.Store,
		cursors: deps.Cursors, leases: deps.Leases, log: deps.Log.With("flusher", deps.ID),
		mem: deps.Mem, id: deps.ID,
		ackWait: AckWait(dc), dests: map[string]*dest{}, held: map[*message]struct{}{}, parts: map[int]*part{},
		rowsTarget: int64(dc.FlushRows), states: deps.States, overdue: map[*dest]time.Time{},
	}
	m.settler = natsx.NewSettler(natsx.SettleOptions{Stage: "flusher", DLQ: natsx.NewDeadLetter(deps.JS, "flusher"), Log: m.log})
	m.cond = sync.NewCond(&m.mu)
	m.commitQ = make(chan *flushJob, commitQueue)
	m.pub = natsx.NewPublisher(deps.JS, commitBatchMax)
	// A segment's PACKS event stays within half the server's max_payload
	// (groupSegments); 1 MiB, the default, when the connection does not say.
	m.eventBudget = 512 << 10
	if mp := natsx.MaxPayload(deps.JS); mp > 0 {
		m.eventBudget = int(mp / 2)
	}
	m.pub.AckTimeout = 10 * time.Second
	var err error
	if dir := os.Getenv(CoreTraceEnv); dir != "" {
		if m.trace, err = openCoreTrace(dir, m.id); err != nil {
			return nil, fmt.Errorf("creating flusher: %w", err)
		}
	}
	m.m = newMetrics(deps.Metrics)
	m.lcm = newLifecycleMetrics(deps.Metrics)
	m.im = newIdleMetrics(deps.Metrics)
	return m, nil
}

// ID is this replica's holder id.
func (m *Manager) ID() string { return m.id }

// AckWait is the partition consumers' AckWait: two flush intervals plus a
// margin of half an interval (10s to 30s) for a slow flush; in-progress acks
// cover the rest. 60s -> 150s; 5s -> 20s; 1s -> 12s. The margin's floor
// keeps in-progress acks off the normal path: with a 1s margin, 1,000
// destinations flushed every second under load had every held message
// touched every second — 8 in-progress acks per routed message, which
// slowed the broker, which held messages longer (measured: 321,235
// in-progress acks for 40,000 routed messages). The price is how long a
// dead flusher's unacked messages wait before redelivery.
func AckWait(dc config.Delivery) time.Duration {
	return 2*dc.FlushInterval + min(max(dc.FlushInterval/2, 10*time.Second), 30*time.Second)
}

// ConsumerConfig is the durable consumer of partition p.
func ConsumerConfig(dc config.Delivery, p int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:     proto.ConsumerFlusher(p),
		Description: fmt.Sprintf("sluice flusher, ROUTED partition %d", p),
		// Partition messages, and per-destination messages left in the
		// stream from before partition messages (one slice each).
		FilterSubjects: []string{proto.RoutedPartitionSubject(p), proto.RoutedPartitionFilter(p)},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        AckWait(dc),
		MaxAckPending:  dc.MaxAckPending,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		MaxDeliver:     -1,
		MaxWaiting:     16,
	}
}

// EnsureConsumers creates (idempotently) the durable consumers of every
// partition, owned or not, so ack floors are readable for the frontier.
func EnsureConsumers(ctx context.Context, js jetstream.JetStream, dc config.Delivery) error {
	for p := 0; p < dc.Partitions; p++ {
		if _, err := js.CreateOrUpdateConsumer(ctx, proto.StreamRouted, ConsumerConfig(dc, p)); err != nil {
			return fmt.Errorf("ensuring consumer %s: %w", proto.ConsumerFlusher(p), err)
		}
	}
	return nil
}

// Run owns partitions, consumes and flushes until ctx is cancelled, then
// drains (flushes every buffer within delivery.drain_timeout) and releases
// its leases. It returns nil on a clean shutdown.
func (m *Manager) Run(ctx context.Context) error {
	if m.trace != nil {
		defer func() {
			if err := m.trace.close(); err != nil {
				m.log.Warn("writing the core trace", "error", err)
			}
		}()
	}
	if err := EnsureConsumers(ctx, m.js, m.dc); err != nil {
		return err
	}
	m.log.Info("flusher starting", "partitions", m.dc.Partitions, "workers", m.dc.Workers,
		"flush_interval", m.dc.FlushInterval, "memory_budget", int64(m.dc.MemoryBudget), "ack_wait", m.ackWait)
	if !m.startLifecycle(ctx) { // lifecycle: states loaded before anything flushes
		return nil
	}

	// Workers outlive ctx by the drain; they stop on workCtx.
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	workers, wctx := errgroup.WithContext(workCtx)
	for i := 0; i < m.dc.Workers; i++ {
		workers.Go(func() error { m.worker(wctx); return nil })
	}
	// The committer ends once the workers have stopped and it has
	// committed (or failed) every flush they queued.
	committed := make(chan struct{})
	go func() { defer close(committed); m.committer(workCtx) }()
	stopCommitter := func() {
		close(m.commitQ)
		<-committed
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return m.ownership(gctx) })
	g.Go(func() error { m.triggers(gctx); return nil })
	g.Go(func() error { m.keepAlive(gctx); return nil })
	if m.states != nil {
		g.Go(func() error { m.lifecycle(gctx); return nil })
	}
	err := g.Wait()
	m.fetchers.Wait()

	// Fetch loops are children of gctx: wait for them.
	m.mu.Lock()
	parts := make([]*part, 0, len(m.parts))
	for _, p := range m.parts {
		parts = append(parts, p)
	}
	m.mu.Unlock()
	for _, p := range parts {
		p.cancel()
		<-p.done
	}
	if m.abrupt {
		m.mu.Lock()
		m.stopping = true
		for _, d := range m.queue {
			d.queued = false
		}
		m.queue = nil
		m.cond.Broadcast()
		m.mu.Unlock()
		stopWork()
		_ = workers.Wait()
		stopCommitter()
		m.dropAll()
		return nil
	}
	m.drain(workCtx)
	m.mu.Lock()
	m.stopping = true
	m.cond.Broadcast()
	m.mu.Unlock()
	_ = workers.Wait()
	stopCommitter()
	stopWork()
	m.releaseAll()
	m.dropAll()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	m.log.Info("flusher stopped")
	return nil
}

// drain flushes every buffer, within drain_timeout.
func (m *Manager) drain(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, m.dc.DrainTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		m.mu.Lock()
		busy := false
		for _, d := range m.dests {
			if len(d.c.Live()) > 0 && !d.c.Halted() && !d.part.c.Lost() && !m.heldLocked(d) {
				busy = true
				m.enqueueLocked(d, "shutdown")
			}
			if d.c.Inflight() != nil {
				busy = true
			}
		}
		m.mu.Unlock()
		if !busy {
			return
		}
		select {
		case <-ctx.Done():
			m.log.Warn("drain timed out; unflushed messages will be redelivered", "timeout", m.dc.DrainTimeout)
			return
		case <-tick.C:
		}
	}
}

// dropAll releases every buffered batch without acking.
func (m *Manager) dropAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.parts {
		m.dropPartLocked(p, false)
	}
}

// dropPartLocked forgets a partition's buffers: nothing is acked, so every
// message redelivers to the next owner. With nak, messages are nak'd to
// speed that up.
func (m *Manager) dropPartLocked(p *part, nak bool) {
	dropHeldClearsLocked(p)
	for _, it := range p.c.Lose() {
		if nak && !it.m.done {
			it.m.done = true
			_ = it.m.msg.Nak()
		}
		m.releaseItemLocked(it)
	}
	for _, d := range p.dests {
		d.liveRows, d.liveBytes = 0, 0
		delete(m.dests, d.name)
	}
	m.updateGaugesLocked()
}

func (m *Manager) releaseItemLocked(it *item) {
	if it.src != nil {
		it.release()
		m.totalBytes -= it.bytes
		m.totalRows -= it.rows
		if it.m.buffered--; it.m.buffered == 0 {
			it.d.part.held--
			delete(m.held, it.m)
		}
	}
}

// enqueueLocked schedules d for a flush.
func (m *Manager) enqueueLocked(d *dest, trigger string) {
	if d.queued || d.c.Inflight() != nil || len(d.c.Live()) == 0 || d.c.Halted() || d.part.c.Lost() || m.heldLocked(d) {
		return
	}
	d.queued = true
	m.queue = append(m.queue, d)
	m.m.triggers.WithLabelValues(trigger).Inc()
	m.cond.Signal()
}

func (m *Manager) worker(ctx context.Context) {
	for {
		m.mu.Lock()
		for len(m.queue) == 0 && !m.stopping {
			m.cond.Wait()
		}
		if len(m.queue) == 0 {
			m.mu.Unlock()
			return
		}
		d := m.queue[0]
		m.queue[0] = nil
		m.queue = m.queue[1:]
		d.queued = false
		job := m.startFlushLocked(d)
		if job == nil {
			m.overdueLocked(d) // held: the interval trigger re-checks it
		}
		m.mu.Unlock()
		switch {
		case job == nil:
		case m.noGroupCommit:
			m.runFlush(ctx, job)
		default:
			m.prepareFlush(ctx, job)
		}
	}
}

// overBudget reports whether buffered memory is at the watermark.
func (m *Manager) overBudgetLocked() bool { return m.heldBytesLocked() >= int64(m.dc.MemoryBudget) }

// heldBytesLocked is what counts against delivery.memory_budget: the
// buffered (and resolved) bytes, and destOverhead per destination in
// memory (at 100,000 destinations that is about 100 MB).
func (m *Manager) heldBytesLocked() int64 {
	return m.totalBytes + int64(len(m.dests))*destOverhead
}

// destOverhead is a destination's memory while it is in memory, its
// buffers aside: the shell's dest, the core's and its pending set (about
// 1 KiB each, measured in a heap profile at 100,000 destinations).
const destOverhead = 1 << 10

// triggers evaluates the interval, memory and ack-pending triggers.
func (m *Manager) triggers(ctx context.Context) {
	every := min(max(m.dc.FlushInterval/20, 20*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.evaluate(time.Now())
	}
}

// settling reports whether p was claimed so recently that it may settle
// any moment (a fetch wait and two settle checks): an interval flush then
// waits, since an unsettled flush writes no cursor and the cursor would
// lag until the next flush. Size and memory triggers do not wait.
func settling(p *part, now time.Time) bool {
	return p != nil && !p.c.Seeded() && now.Sub(p.claimedAt) < fetchWait+drainSlack+2*settleEvery
}

func (m *Manager) evaluate(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.intervalLocked(now)
	// Memory watermark: flush the largest buffers first.
	if m.overBudgetLocked() {
		m.heldEvictLocked() // lifecycle: held buffers give memory back
		candidates := m.liveBuffersLocked()
		slices.SortFunc(candidates, func(a, b *dest) int { return int(b.liveBytes - a.liveBytes) })
		projected := m.heldBytesLocked()
		for _, d := range candidates {
			if projected < int64(m.dc.MemoryBudget)*3/4 {
				break
			}
			if d.c.Inflight() == nil && !d.queued {
				m.enqueueLocked(d, "memory")
				projected -= d.liveBytes
			}
		}
	}
	// Ack-pending: flush a partition's oldest buffers before the consumer's
	// MaxAckPending stalls delivery.
	high := m.dc.MaxAckPending * 3 / 4
	for _, p := range m.parts {
		if p.held < high || p.c.Lost() {
			continue
		}
		var ds []*dest
		for _, d := range p.dests {
			if len(d.c.Live()) > 0 && d.c.Inflight() == nil && !d.queued {
				ds = append(ds, d)
			}
		}
		slices.SortFunc(ds, func(a, b *dest) int { return a.liveSince.Compare(b.liveSince) })
		projected := p.held
		for _, d := range ds {
			if projected < m.dc.MaxAckPending/2 {
				break
			}
			m.enqueueLocked(d, "ack_pending")
			projected -= len(d.c.Live())
		}
	}
	m.sweepIdleLocked(now)
	// The gauges cost O(destinations in memory): at most every 250 ms.
	if now.Sub(m.gaugedAt) >= 250*time.Millisecond {
		m.gaugedAt = now
		m.updateGaugesLocked()
	}
}

// keepAlive sends in-progress acks for messages held longer than half of
// AckWait (checked every sixth), so buffering never causes a redelivery.
func (m *Manager) keepAlive(ctx context.Context) {
	every := max(m.ackWait/6, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var touch []jetstream.Msg
		m.mu.Lock()
		// The messages with a slice buffered or in flight, each once
		// (at 10,000 tenants a message has hundreds of slices).
		for msg := range m.held {
			if now.Sub(msg.touched) >= m.ackWait/2 {
				msg.touched = now
				touch = append(touch, msg.msg)
			}
		}
		m.mu.Unlock()
		for _, msg := range touch {
			_ = msg.InProgress()
		}
		m.m.inProgress.Add(float64(len(touch)))
	}
}

// mutants are the core's switches the test knobs turn on.
func (m *Manager) mutants() core.Mutant {
	var mut core.Mutant
	for _, k := range []struct {
		on bool
		m  core.Mutant
	}{
		{m.scalarMaxCursor, core.ScalarMaxCursor}, {m.keepLiveOnFailure, core.KeepLiveOnFailure},
		{m.forgetNaked, core.ForgetNaked}, {m.noEpochCheck, core.NoEpochCheck},
		{m.dropRedelivered, core.DropRedelivered}, {m.noAckFence, core.NoAckFence}, {m.noSettle, core.SeedAtClaim},
		{m.noFetchDeadline, core.NoFetchDeadline}, {m.noHeldPending, core.ForgetHeld}, {m.ackFirstSlice, core.AckFirstSlice},
	} {
		if k.on {
			mut |= k.m
		}
	}
	return mut
}
