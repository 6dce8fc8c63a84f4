package workload

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// Options configure a Generator. Zero values take the defaults noted.
type Options struct {
	Seed    uint64
	Tenants int // default 300
	// ManyTenants is the tenant count of wl_events (tenants TenantName(0)
	// .. TenantName(ManyTenants-1), so the first Tenants of them also own
	// rows of the other tables); default 1000. Populate gives every one of
	// them at least one row; traffic picks them uniformly.
	ManyTenants int
	Workers     int // concurrent connections; default 4

	// Run stops after Transactions (across workers), after Duration, or
	// when ctx ends, whichever comes first. With neither set Run needs ctx.
	Transactions int
	Duration     time.Duration
	// Rate is transactions per second across workers; 0 = as fast as
	// possible.
	Rate float64
	// OpsPerTx is the maximum number of operations in an ordinary
	// transaction (1..OpsPerTx); default 6.
	OpsPerTx int

	// InitialRows is what Populate inserts into wl_orders; the other tables
	// get proportionally fewer (accounts 1/2, wide 1/4, docs 1/40).
	// Default 2000. wl_events gets ManyTenants rows, one per tenant.
	InitialRows int
	// LargeEvery makes every LargeEvery-th transaction of worker 0 a large
	// one of LargeRows row changes in one tenant; default 400, negative
	// never. LargeRows default 12000.
	LargeEvery int
	LargeRows  int
	// AddColumnAt is the fraction of the run (by transactions, else by
	// duration) at which wl_orders gains the column AddedColumn; default
	// 0.5, negative never.
	AddColumnAt float64
	// Edge is the probability that a wl_wide value is an edge value;
	// default 0.08.
	Edge float64
	// DocBytes is the size of a wl_docs body; default 100 KiB.
	DocBytes int
	// PayloadBytes is the size of a wl_events payload (every 2nd row has
	// one; above 2 KB it is stored out of line); default 3 KiB.
	PayloadBytes int
	// EventsWeight is wl_events' weight in the choice of an operation's
	// table (wl_orders 50, wl_accounts 30, wl_wide 20, wl_docs 10);
	// default 20, negative never. The tenants it changes are what the
	// oracle must read, so the e2e tests keep it low.
	EventsWeight int
	// Mix weighs the operations; the zero Mix is DefaultMix.
	Mix Mix

	// OnStatement, when set, sees every statement as it is queued.
	OnStatement func(worker int, sql string, args []any)
	Log         *slog.Logger
}

// Mix is the relative weight of each operation. MoveToast is the percentage
// of wl_docs and wl_events moves that leave the TOASTed value unchanged
// (the others rewrite it too).
type Mix struct {
	Insert, Update, Delete, Reinsert, Move int
	MoveToast                              int
}

// DefaultMix is the operation mix of the tests.
var DefaultMix = Mix{Insert: 30, Update: 40, Delete: 12, Reinsert: 6, Move: 12}

// EventsMix is the operation mix of wl_events, whatever Options.Mix says
// (its MoveToast applies): mostly moves between its many tenants, updates
// that leave the TOASTed payload alone, and deletes.
var EventsMix = Mix{Insert: 10, Update: 30, Delete: 15, Reinsert: 5, Move: 40}

// Stats count what a run committed.
type Stats struct {
	Transactions      int64
	Statements        int64
	Rows              int64 // row changes committed
	Inserts           int64
	Updates           int64
	Deletes           int64
	Reinserts         int64
	Moves             int64
	LargeTransactions int64
	Retries           int64 // failed transactions, re-synced and carried on
	ColumnAdded       bool
	// Digest is a hash of every statement each worker issued, in worker
	// order: equal for equal Options when no transaction failed.
	Digest  string
	Elapsed time.Duration
}

func (s Stats) String() string {
	return fmt.Sprintf("%d tx, %d statements, %d rows (ins %d, upd %d, del %d, reins %d, moves %d, large tx %d), %d retries, column added %v, %s",
		s.Transactions, s.Statements, s.Rows, s.Inserts, s.Updates, s.Deletes, s.Reinserts, s.Moves, s.LargeTransactions,
		s.Retries, s.ColumnAdded, s.Elapsed.Round(time.Millisecond))
}

type counters struct {
	tx, stmts, rows, ins, upd, del, reins, moves, large, retries atomic.Int64
}

// Generator holds the workers' models between Populate and Run.
type Generator struct {
	o       Options
	tenants []string
	many    []string // wl_events' tenants
	index   map[string]int
	touched touched
	workers []*worker
	added   atomic.Bool
	// tracking is set while Run runs: touched records Run's changes only.
	tracking atomic.Bool
	c        counters
}

// New makes a generator; it does not touch the database.
func New(o Options) (*Generator, error) {
	if o.Tenants == 0 {
		o.Tenants = 300
	}
	if o.ManyTenants == 0 {
		o.ManyTenants = 1000
	}
	if o.PayloadBytes == 0 {
		o.PayloadBytes = 3 << 10
	}
	if o.EventsWeight == 0 {
		o.EventsWeight = 20
	}
	if o.EventsWeight < 0 {
		o.EventsWeight = 0
	}
	if o.Workers == 0 {
		o.Workers = 4
	}
	if o.OpsPerTx == 0 {
		o.OpsPerTx = 6
	}
	if o.InitialRows == 0 {
		o.InitialRows = 2000
	}
	if o.LargeEvery == 0 {
		o.LargeEvery = 400
	}
	if o.LargeRows == 0 {
		o.LargeRows = 12000
	}
	if o.AddColumnAt == 0 {
		o.AddColumnAt = 0.5
	}
	if o.Edge == 0 {
		o.Edge = 0.08
	}
	if o.DocBytes == 0 {
		o.DocBytes = 100 << 10
	}
	if o.Mix == (Mix{}) {
		o.Mix = DefaultMix
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Tenants < 1 || o.ManyTenants < 1 || o.Workers < 1 || o.OpsPerTx < 1 || o.Rate < 0 || o.AddColumnAt > 1 {
		return nil, fmt.Errorf("%w: %+v", ErrBadOptions, o)
	}
	g := &Generator{o: o, index: map[string]int{}, touched: touched{m: map[string]map[string]struct{}{}}}
	for i := 0; i < max(o.Tenants, o.ManyTenants); i++ {
		name := TenantName(i)
		if i < o.Tenants {
			g.tenants = append(g.tenants, name)
		}
		if i < o.ManyTenants {
			g.many = append(g.many, name)
		}
		g.index[name] = i
	}
	for w := 0; w < o.Workers; w++ {
		r := rand.New(rand.NewPCG(o.Seed, uint64(w)+1))
		g.workers = append(g.workers, &worker{
			g: g, n: w, r: r,
			zipf:   rand.NewZipf(r, 1.1, 3, uint64(o.Tenants-1)),
			models: map[string]*model{Orders: newModel(), Accounts: newModel(), Wide: newModel(), Docs: newModel(), Events: newModel()},
			digest: sha256.New(),
		})
	}
	return g, nil
}

// TenantName is the routing value of tenant i. Most are plain destination
// names; every 37th is not (it needs the destination encoding).
func TenantName(i int) string {
	switch i % 37 {
	case 11:
		return fmt.Sprintf("acme.corp/%03d", i)
	case 29:
		return fmt.Sprintf("größe %03d", i)
	}
	return fmt.Sprintf("t%03d", i)
}

// Tenants lists every routing value the generator may use in the tables
// other than wl_events.
func (g *Generator) Tenants() []string { return append([]string(nil), g.tenants...) }

// ManyTenants lists every routing value the generator may use in wl_events.
func (g *Generator) ManyTenants() []string { return append([]string(nil), g.many...) }

// Touched lists, sorted, the routing values of table whose rows any Run
// changed (Populate's rows are not counted): inserted, updated, deleted,
// moved from or moved to. It counts
// the statements of transactions that failed too (their outcome may be
// unknown), so it is a superset of the tenants the run changed.
func (g *Generator) Touched(table string) []string { return g.touched.list(table) }

// touched records the routing values Run changes, per table.
type touched struct {
	mu sync.Mutex
	m  map[string]map[string]struct{}
}

func (t *touched) add(table, tenant string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[table] == nil {
		t.m[table] = map[string]struct{}{}
	}
	t.m[table][tenant] = struct{}{}
}

func (t *touched) list(table string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.m[table]))
	for k := range t.m[table] {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Options returns the options with defaults filled in.
func (g *Generator) Options() Options { return g.o }

// Stats returns what has been committed so far.
func (g *Generator) Stats() Stats {
	st := Stats{
		Transactions: g.c.tx.Load(), Statements: g.c.stmts.Load(), Rows: g.c.rows.Load(),
		Inserts: g.c.ins.Load(), Updates: g.c.upd.Load(), Deletes: g.c.del.Load(), Reinserts: g.c.reins.Load(),
		Moves: g.c.moves.Load(), LargeTransactions: g.c.large.Load(), Retries: g.c.retries.Load(), ColumnAdded: g.added.Load(),
	}
	h := sha256.New()
	for _, w := range g.workers {
		w.mu.Lock()
		h.Write(w.digest.Sum(nil))
		w.mu.Unlock()
	}
	st.Digest = hex.EncodeToString(h.Sum(nil))[:16]
	return st
}

// Run is New, Schema, Populate and Run in one call.
func Run(ctx context.Context, pool *pgxpool.Pool, o Options) (Stats, error) {
	g, err := New(o)
	if err != nil {
		return Stats{}, err
	}
	if err := Schema(ctx, pool); err != nil {
		return Stats{}, err
	}
	if err := g.Populate(ctx, pool); err != nil {
		return g.Stats(), err
	}
	return g.Run(ctx, pool)
}

// Populate inserts the initial rows: skewed tenant sizes, every table.
func (g *Generator) Populate(ctx context.Context, pool *pgxpool.Pool) error {
	start := time.Now()
	eg, ctx := errgroup.WithContext(ctx)
	for _, w := range g.workers {
		eg.Go(func() error {
			share := func(n int) int { return (n + g.o.Workers - 1 - w.n) / g.o.Workers }
			todo := []struct {
				table string
				n     int
			}{{Orders, share(g.o.InitialRows)}, {Accounts, share(g.o.InitialRows / 2)}, {Wide, share(g.o.InitialRows / 4)}, {Docs, share(g.o.InitialRows / 40)},
				{Events, share(g.o.ManyTenants)}}
			for _, td := range todo {
				for done := 0; done < td.n; {
					n := min(200, td.n-done)
					first := done
					err := w.transact(ctx, pool, func(tx *txn) {
						for i := 0; i < n; i++ {
							tenant := w.tenant(td.table)
							if td.table == Events {
								// Every tenant gets a row: worker w
								// fills tenants w, w+Workers, ...
								tenant = (first+i)*g.o.Workers + w.n
							}
							w.insert(tx, td.table, tenant)
						}
					})
					if err != nil {
						return err
					}
					done += n
				}
			}
			return nil
		})
	}
	err := eg.Wait()
	g.o.Log.Info("workload populated", "rows", g.c.rows.Load(), "elapsed", time.Since(start).Round(time.Millisecond))
	return err
}

// Run runs the traffic until Transactions, Duration or ctx. A cancelled ctx
// is a normal end: Run returns the stats and nil.
func (g *Generator) Run(ctx context.Context, pool *pgxpool.Pool) (Stats, error) {
	start := time.Now()
	g.tracking.Store(true)
	defer g.tracking.Store(false)
	var deadline time.Time
	if g.o.Duration > 0 {
		deadline = start.Add(g.o.Duration)
	}
	if g.o.Transactions == 0 && deadline.IsZero() && ctx.Done() == nil {
		return g.Stats(), fmt.Errorf("%w: set Transactions, Duration or a cancellable ctx", ErrBadOptions)
	}
	lim := &limiter{rate: g.o.Rate}
	// The column is added at a barrier: every worker stops at its point,
	// one ALTER runs, then all resume.
	bar := newBarrier(g.o.Workers)
	addAt := func(w *worker, i, count int) bool {
		if g.o.AddColumnAt < 0 || g.added.Load() || w.passed {
			return false
		}
		if count > 0 {
			return i >= int(g.o.AddColumnAt*float64(count))
		}
		return !deadline.IsZero() && time.Since(start) >= time.Duration(g.o.AddColumnAt*float64(g.o.Duration))
	}
	eg, ectx := errgroup.WithContext(ctx)
	for _, w := range g.workers {
		count := 0
		if g.o.Transactions > 0 {
			count = g.o.Transactions / g.o.Workers
			if w.n < g.o.Transactions%g.o.Workers {
				count++
			}
		}
		eg.Go(func() error {
			defer bar.leave()
			for i := 0; count == 0 || i < count; i++ {
				if ectx.Err() != nil || (!deadline.IsZero() && time.Now().After(deadline)) {
					return nil
				}
				if addAt(w, i, count) {
					w.passed = true
					if err := bar.await(ectx, func() error { return g.addColumn(ectx, pool) }); err != nil {
						return nil // ctx ended
					}
				}
				if err := lim.wait(ectx); err != nil {
					return nil
				}
				large := w.n == 0 && g.o.LargeEvery > 0 && i%g.o.LargeEvery == g.o.LargeEvery/2
				err := w.transact(ectx, pool, func(tx *txn) {
					if large {
						w.large(tx)
						return
					}
					for k := w.r.IntN(g.o.OpsPerTx) + 1; k > 0; k-- {
						w.op(tx)
					}
				})
				if err != nil {
					if ectx.Err() != nil {
						return nil
					}
					return err
				}
			}
			return nil
		})
	}
	err := eg.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	st := g.Stats()
	st.Elapsed = time.Since(start)
	g.o.Log.Info("workload ran", "stats", st.String())
	return st, err
}

func (g *Generator) addColumn(ctx context.Context, pool *pgxpool.Pool) error {
	for attempt := 0; ; attempt++ {
		_, err := pool.Exec(ctx, `ALTER TABLE public.wl_orders ADD COLUMN IF NOT EXISTS `+AddedColumn+` integer`)
		if err == nil {
			g.added.Store(true)
			g.o.Log.Info("workload added a column", "table", Orders, "column", AddedColumn)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		g.o.Log.Warn("workload: adding the column failed, retrying", "err", err)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

// barrier lets n workers meet once; the last to arrive runs f.
type barrier struct {
	mu      sync.Mutex
	n       int // workers still running
	arrived int
	done    chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, done: make(chan struct{})} }

func (b *barrier) await(ctx context.Context, f func() error) error {
	b.mu.Lock()
	b.arrived++
	last := b.arrived == b.n
	b.mu.Unlock()
	if last {
		err := f()
		close(b.done)
		return err
	}
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leave is called by a worker that finishes: the barrier stops waiting for
// it (a worker that already arrived leaves after the barrier opened).
func (b *barrier) leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.done:
		return
	default:
	}
	b.n--
	if b.n == b.arrived && b.arrived > 0 {
		// Everyone left has arrived; nobody runs f, the column is not added.
		close(b.done)
	}
}

// limiter spaces transactions 1/rate apart across workers.
type limiter struct {
	rate float64
	mu   sync.Mutex
	next time.Time
}

func (l *limiter) wait(ctx context.Context) error {
	if l.rate <= 0 {
		return ctx.Err()
	}
	l.mu.Lock()
	now := time.Now()
	if l.next.Before(now) {
		l.next = now
	}
	at := l.next
	l.next = l.next.Add(time.Duration(float64(time.Second) / l.rate))
	l.mu.Unlock()
	return sleep(ctx, time.Until(at))
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func backoff(attempt int) time.Duration {
	return min(100*time.Millisecond<<min(attempt, 5), 2*time.Second)
}

func digestArgs(h hash.Hash, sql string, args []any) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(sql)))
	h.Write(n[:])
	h.Write([]byte(sql))
	for _, a := range args {
		if v, ok := a.(*string); ok {
			if v == nil {
				h.Write([]byte{0})
			} else {
				h.Write([]byte{1})
				h.Write([]byte(*v))
			}
			continue
		}
		fmt.Fprintf(h, "%T:%v|", a, a)
	}
}
