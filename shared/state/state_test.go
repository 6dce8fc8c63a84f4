package state

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(shutdownAfter{m}) }

type shutdownAfter struct{ m *testing.M }

func (s shutdownAfter) Run() int {
	code := s.m.Run()
	pgtest.Shutdown()
	return code
}

const schema = "sluice"

func newPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, dsn
}

func migrated(t *testing.T) (*pgxpool.Pool, *Leases, *Cursors) {
	t.Helper()
	pool, _ := newPool(t)
	if err := Migrate(context.Background(), pool, schema); err != nil {
		t.Fatal(err)
	}
	return pool, NewLeases(pool, schema), NewCursors(pool, schema)
}

// expire ends a lease now by the server clock, as if its TTL had run out.
func expire(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE sluice.leases SET expires_at = now() - interval '1 second' WHERE name = $1`, name); err != nil {
		t.Fatal(err)
	}
}

func acquire(t *testing.T, ls *Leases, name, holder string, ttl time.Duration) Lease {
	t.Helper()
	l, ok, err := ls.Acquire(context.Background(), name, holder, ttl)
	if err != nil || !ok {
		t.Fatalf("acquire %s by %s: ok=%v err=%v", name, holder, ok, err)
	}
	return l
}

func pos(lsn, seq uint64) proto.Position { return proto.Position{LSN: proto.LSN(lsn), Seq: seq} }

func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	ctx := context.Background()
	pool, _ := newPool(t)
	for round := 0; round < 2; round++ {
		var g errgroup.Group
		for i := 0; i < 4; i++ {
			g.Go(func() error { return Migrate(ctx, pool, "sluice_x") })
		}
		if err := g.Wait(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	var v int
	if err := pool.QueryRow(ctx, `SELECT version FROM sluice_x.schema_version`).Scan(&v); err != nil || v != SchemaVersion {
		t.Fatalf("schema_version=%d err=%v", v, err)
	}
	// A newer schema is refused, not migrated.
	if _, err := pool.Exec(ctx, `UPDATE sluice_x.schema_version SET version = 99`); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, pool, "sluice_x"); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("migrate over a newer schema: %v, want ErrSchemaVersion", err)
	}
}

func TestLeaseLifecycle(t *testing.T) {
	ctx := context.Background()
	pool, ls, _ := migrated(t)

	a := acquire(t, ls, "flusher-p0", "a", time.Minute)
	if a.Term != 1 {
		t.Fatalf("first term %d", a.Term)
	}
	if _, ok, err := ls.Acquire(ctx, "flusher-p0", "b", time.Minute); ok || err != nil {
		t.Fatalf("b acquired a live lease of a: ok=%v err=%v", ok, err)
	}
	a2, err := ls.Renew(ctx, a, time.Minute)
	if err != nil || a2.Term != a.Term || !a2.Expires.After(a.Expires) && !a2.Expires.Equal(a.Expires) {
		t.Fatalf("renew: %+v %v", a2, err)
	}
	// Same holder re-acquires: term+1, and the old incarnation is fenced.
	a3 := acquire(t, ls, "flusher-p0", "a", time.Minute)
	if a3.Term != 2 {
		t.Fatalf("re-acquire term %d, want 2", a3.Term)
	}
	if _, err := ls.Renew(ctx, a, time.Minute); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renew of the previous term: %v", err)
	}

	// Real expiry by the server clock: a short TTL, then b takes over.
	short := acquire(t, ls, "flusher-p0", "a", 150*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	var b Lease
	for {
		l, ok, err := ls.Acquire(ctx, "flusher-p0", "b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			b = l
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease never expired")
		}
		time.Sleep(20 * time.Millisecond) // retry-until: waiting for the server clock
	}
	if b.Term != short.Term+1 || b.Holder != "b" {
		t.Fatalf("takeover %+v after %+v", b, short)
	}
	if _, err := ls.Renew(ctx, short, time.Minute); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("zombie renew: %v, want ErrLeaseLost", err)
	}
	// A zombie's release does not touch b's lease.
	if err := ls.Release(ctx, short); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := ls.Acquire(ctx, "flusher-p0", "c", time.Minute); ok {
		t.Fatal("zombie release freed b's lease")
	}
	// b releases: c takes over at once.
	if err := ls.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	c := acquire(t, ls, "flusher-p0", "c", time.Minute)
	if c.Term != b.Term+1 {
		t.Fatalf("term after release %d", c.Term)
	}

	acquire(t, ls, "flusher-p1", "c", time.Minute)
	acquire(t, ls, "publisher", "p", time.Minute)
	expire(t, pool, "flusher-p1")
	all, err := ls.List(ctx, "flusher-")
	if err != nil || len(all) != 2 || all[0].Name != "flusher-p0" || all[1].Name != "flusher-p1" {
		t.Fatalf("list: %+v %v", all, err)
	}
	live, err := ls.ListLive(ctx, "flusher-")
	if err != nil || len(live) != 1 || live[0].Name != "flusher-p0" {
		t.Fatalf("list live: %+v %v", live, err)
	}
	if _, _, err := ls.Acquire(ctx, "x", "a", 0); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("zero ttl: %v", err)
	}
}

// zombieScenario: a's lease on the partition is taken over by b; a (the
// zombie) then tries to advance the cursor past b's position. It returns the
// zombie's Advance error and the cursor afterwards.
func zombieScenario(t *testing.T, pool *pgxpool.Pool, ls *Leases, cs *Cursors) (error, proto.Position) {
	t.Helper()
	ctx := context.Background()
	a := acquire(t, ls, "flusher-p3", "a", time.Minute)
	if ok, err := cs.Advance(ctx, a, "shop1", 3, pos(100, 1)); !ok || err != nil {
		t.Fatalf("owner advance: %v %v", ok, err)
	}
	expire(t, pool, "flusher-p3") // a stalls (GC pause, partition) past its TTL
	b := acquire(t, ls, "flusher-p3", "b", time.Minute)
	if ok, err := cs.Advance(ctx, b, "shop1", 3, pos(150, 1)); !ok || err != nil {
		t.Fatalf("new owner advance: %v %v", ok, err)
	}
	_, zerr := cs.Advance(ctx, a, "shop1", 3, pos(200, 7))
	got, _, err := cs.Get(ctx, "shop1")
	if err != nil {
		t.Fatal(err)
	}
	return zerr, got
}

func TestZombieIsFenced(t *testing.T) {
	pool, ls, cs := migrated(t)
	zerr, got := zombieScenario(t, pool, ls, cs)
	if !errors.Is(zerr, ErrLeaseLost) {
		t.Fatalf("zombie advance: %v, want ErrLeaseLost", zerr)
	}
	if got != pos(150, 1) {
		t.Fatalf("cursor %s after the zombie's write, want the owner's 0/96:1", got)
	}
	// The zombie's renew fails too.
	a := Lease{Name: "flusher-p3", Holder: "a", Term: 1}
	if _, err := ls.Renew(context.Background(), a, time.Minute); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("zombie renew: %v", err)
	}
	// An expired lease with no successor fences as well.
	b := Lease{Name: "flusher-p3", Holder: "b", Term: 2}
	expire(t, pool, "flusher-p3")
	if _, err := cs.Advance(context.Background(), b, "shop1", 3, pos(300, 1)); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("expired lease advance: %v", err)
	}
}

// Negative control: with the fence switched off the same zombie write lands,
// so the fence is what protects the cursor.
func TestZombieNegativeControlWithoutFence(t *testing.T) {
	pool, ls, cs := migrated(t)
	zerr, got := zombieScenario(t, pool, ls, cs.withoutSafety(true, false))
	if zerr != nil || got != pos(200, 7) {
		t.Fatalf("without the fence the zombie should win: err=%v cursor=%s", zerr, got)
	}
}

// staleScenario advances to 0/C8:5 then writes older positions.
func staleScenario(t *testing.T, ls *Leases, cs *Cursors) proto.Position {
	t.Helper()
	ctx := context.Background()
	l := acquire(t, ls, "flusher-p0", "a", time.Minute)
	if ok, err := cs.Advance(ctx, l, "d1", 0, pos(200, 5)); !ok || err != nil {
		t.Fatalf("advance: %v %v", ok, err)
	}
	for _, p := range []proto.Position{pos(200, 4), pos(199, 9), pos(0, 0)} {
		ok, err := cs.Advance(ctx, l, "d1", 0, p)
		if err != nil {
			t.Fatalf("stale write %s: %v", p, err)
		}
		if ok && !cs.noMonotonic {
			t.Fatalf("stale write %s reported advanced", p)
		}
	}
	got, _, err := cs.Get(ctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestMonotonicGuard(t *testing.T) {
	ctx := context.Background()
	_, ls, cs := migrated(t)
	if got := staleScenario(t, ls, cs); got != pos(200, 5) {
		t.Fatalf("cursor moved back to %s", got)
	}
	l := acquire(t, ls, "flusher-p0", "a", time.Minute)
	if ok, err := cs.Advance(ctx, l, "d1", 0, pos(200, 5)); !ok || err != nil {
		t.Fatalf("equal position: %v %v", ok, err)
	}
	if ok, err := cs.Advance(ctx, l, "d1", 0, proto.Through(300)); !ok || err != nil {
		t.Fatalf("MaxSeq position: %v %v", ok, err)
	}
	if got, _, _ := cs.Get(ctx, "d1"); got != proto.Through(300) {
		t.Fatalf("got %s", got)
	}
}

// Negative control: without the WHERE guard a stale write moves the cursor back.
func TestMonotonicNegativeControlWithoutGuard(t *testing.T) {
	_, ls, cs := migrated(t)
	if got := staleScenario(t, ls, cs.withoutSafety(false, true)); got == pos(200, 5) {
		t.Fatalf("without the guard the stale writes should have moved the cursor back, it is %s", got)
	}
}

func TestConcurrentAdvanceEndsAtMax(t *testing.T) {
	ctx := context.Background()
	_, ls, cs := migrated(t)
	l := acquire(t, ls, "flusher-p2", "a", time.Minute)
	const workers, each = 8, 40
	var mu sync.Mutex
	var max proto.Position
	var g errgroup.Group
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; i < each; i++ {
				p := pos(uint64(r.IntN(1000)+1), uint64(r.IntN(10)))
				mu.Lock()
				if max.Less(p) {
					max = p
				}
				mu.Unlock()
				if _, err := cs.Advance(ctx, l, "hot", 2, p); err != nil {
					return fmt.Errorf("worker %d: %w", w, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	got, ok, err := cs.Get(ctx, "hot")
	if err != nil || !ok || got != max {
		t.Fatalf("cursor %s (ok=%v err=%v), want the max %s", got, ok, err, max)
	}
}

func TestLoadAllAndRange(t *testing.T) {
	ctx := context.Background()
	_, ls, cs := migrated(t)
	l := acquire(t, ls, "flusher-p1", "a", time.Minute)
	for _, d := range []string{"a1", "a2", "~c4n64"} {
		if _, err := cs.Advance(ctx, l, d, 1, pos(10, 2)); err != nil {
			t.Fatal(err)
		}
	}
	l5 := acquire(t, ls, "flusher-p5", "a", time.Minute)
	if _, err := cs.Advance(ctx, l5, "b1", 5, pos(11, 1)); err != nil {
		t.Fatal(err)
	}
	m, err := cs.Load(ctx, 1)
	if err != nil || len(m) != 3 || m["~c4n64"] != pos(10, 2) {
		t.Fatalf("load: %v %v", m, err)
	}
	all, err := cs.All(ctx)
	if err != nil || len(all) != 4 || all[3].Destination != "~c4n64" || all[0].Term != l.Term || all[2].Partition != 5 || all[0].UpdatedAt.IsZero() {
		t.Fatalf("all: %+v %v", all, err)
	}
	if _, ok, err := cs.Get(ctx, "none"); ok || err != nil {
		t.Fatalf("get missing: %v %v", ok, err)
	}
	if _, err := cs.Advance(ctx, l, "a1", 1, proto.Position{LSN: 1 << 63}); !errors.Is(err, ErrPositionRange) {
		t.Fatalf("lsn >= 2^63: %v", err)
	}
	if _, err := cs.Advance(ctx, l, "bad name", 1, pos(1, 1)); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("bad destination: %v", err)
	}
}

// takeoverRace holds a fenced Advance open in a transaction (the fence
// passed, the write not yet committed), lets the lease expire by the server
// clock, and starts a takeover. It reports whether the takeover completed
// while the old owner's write was still uncommitted.
func takeoverRace(t *testing.T, pool *pgxpool.Pool, ls *Leases, cs *Cursors) (takeoverFirst bool, b Lease) {
	t.Helper()
	ctx := context.Background()
	a := acquire(t, ls, "flusher-p4", "a", 300*time.Millisecond)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if ok, err := cs.advance(ctx, tx, a, "d4", 4, pos(500, 1)); !ok || err != nil {
		t.Fatalf("advance in tx: %v %v", ok, err)
	}
	waitUntil(t, func() bool {
		var expired bool
		err := pool.QueryRow(ctx, `SELECT expires_at <= now() FROM sluice.leases WHERE name = 'flusher-p4'`).Scan(&expired)
		return err == nil && expired
	})
	type res struct {
		l   Lease
		ok  bool
		err error
	}
	done := make(chan res, 1)
	t0 := time.Now()
	defer func() { t.Logf("takeover race resolved in %s", time.Since(t0)) }()
	go func() {
		l, ok, err := ls.Acquire(ctx, "flusher-p4", "b", time.Minute)
		done <- res{l, ok, err}
	}()
	var r res
	finished := false
	waitUntil(t, func() bool {
		select {
		case r = <-done:
			finished = true
			return true
		default:
		}
		var waiting int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return waiting > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !finished {
		r = <-done
	}
	if r.err != nil || !r.ok {
		t.Fatalf("takeover: %v %v", r.ok, r.err)
	}
	return finished, r.l
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond) // retry-until
	}
}

// A takeover waits for the old owner's in-flight cursor write (the lease row
// is locked FOR SHARE by the write), so no write of term T commits after
// term T+1 was granted: the new owner's Load sees it.
func TestTakeoverWaitsForInflightAdvance(t *testing.T) {
	pool, ls, cs := migrated(t)
	first, b := takeoverRace(t, pool, ls, cs)
	if first {
		t.Fatal("takeover completed while the old owner's fenced write was uncommitted")
	}
	m, err := cs.Load(context.Background(), 4)
	if err != nil || m["d4"] != pos(500, 1) || b.Term != 2 {
		t.Fatalf("new owner sees %v (err %v), term %d", m, err, b.Term)
	}
}

// Negative control: without FOR SHARE the takeover is granted while the old
// owner's write is still in flight, and that write lands under the new term.
func TestTakeoverNegativeControlWithoutShareLock(t *testing.T) {
	pool, ls, cs := migrated(t)
	nl := &Cursors{pool: cs.pool, schema: cs.schema, noShareLock: true}
	nl.build()
	if first, _ := takeoverRace(t, pool, ls, nl); !first {
		t.Fatal("without FOR SHARE the takeover should not have waited")
	}
}

// benchPool is a migrated state database for a benchmark.
func benchPool(b *testing.B) *pgxpool.Pool {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if err := Migrate(ctx, pool, schema); err != nil {
		b.Fatal(err)
	}
	return pool
}

func BenchmarkAdvance(b *testing.B) {
	ctx := context.Background()
	pool := benchPool(b)
	l, _, err := NewLeases(pool, schema).Acquire(ctx, "flusher-p0", "bench", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	cs := NewCursors(pool, schema)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := uint64(0)
		d := fmt.Sprintf("d%d", rand.IntN(1<<30))
		for pb.Next() {
			i++
			if _, err := cs.Advance(ctx, l, d, 0, pos(i, 1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestLeaseHeld: Held and HeldMany say whether a holding (name, holder,
// term) is live by the server clock without extending it: a re-acquired
// lease's old term is not held, nor an expired one, nor another holder's.
func TestLeaseHeld(t *testing.T) {
	ctx := context.Background()
	pool, ls, _ := migrated(t)
	a := acquire(t, ls, "flusher/p0", "x", time.Minute)
	b := acquire(t, ls, "flusher/p1", "x", time.Minute)
	stale := a
	a = acquire(t, ls, "flusher/p0", "x", time.Minute) // term+1
	other := b
	other.Holder = "y"
	for _, c := range []struct {
		l    Lease
		want bool
	}{{a, true}, {b, true}, {stale, false}, {other, false}} {
		if got, err := ls.Held(ctx, c.l); err != nil || got != c.want {
			t.Fatalf("Held(%v) = %v, %v; want %v", c.l.Key(), got, err, c.want)
		}
	}
	live, err := ls.HeldMany(ctx, []Lease{a, b, stale, other, a})
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 2 || !live[a.Key()] || !live[b.Key()] {
		t.Fatalf("HeldMany = %v, want %v and %v", live, a.Key(), b.Key())
	}
	expire(t, pool, a.Name)
	if got, err := ls.Held(ctx, a); err != nil || got {
		t.Fatalf("Held(expired) = %v, %v", got, err)
	}
	if live, err := ls.HeldMany(ctx, []Lease{a, b}); err != nil || len(live) != 1 || !live[b.Key()] {
		t.Fatalf("HeldMany after expiry = %v, %v", live, err)
	}
	if live, err := ls.HeldMany(ctx, nil); err != nil || len(live) != 0 {
		t.Fatalf("HeldMany(nil) = %v, %v", live, err)
	}
	var db time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	if now, err := ls.Now(ctx); err != nil || now.Before(db) {
		t.Fatalf("Now = %v, %v; the server clock read before it was %v", now, err, db)
	}
}

// TestMigrateTablesConcurrent: components creating their own tables while
// others migrate the schema serialize on the migration lock; none fails.
func TestMigrateTablesConcurrent(t *testing.T) {
	ctx := context.Background()
	pool, _ := newPool(t)
	for round := 0; round < 2; round++ {
		var g errgroup.Group
		for i := 0; i < 4; i++ {
			g.Go(func() error {
				if err := Migrate(ctx, pool, "sluice_y"); err != nil {
					return err
				}
				return MigrateTables(ctx, pool, "sluice_y", "test",
					`CREATE TABLE IF NOT EXISTS sluice_y.extra_a (k text PRIMARY KEY)`,
					`CREATE TABLE IF NOT EXISTS sluice_y.extra_b (k text PRIMARY KEY)`)
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO sluice_y.extra_a VALUES ('a'); INSERT INTO sluice_y.extra_b VALUES ('b')`); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAdvanceMany is one group commit's cursor statement: 10,000
// destinations over 16 partition leases, every cursor moving (the
// 10,000-tenant end-to-end case flushes about this many per second).
func BenchmarkAdvanceMany(b *testing.B) {
	ctx := context.Background()
	pool := benchPool(b)
	var leases []Lease
	for p := 0; p < 16; p++ {
		l, _, err := NewLeases(pool, schema).Acquire(ctx, fmt.Sprintf("flusher-p%d", p), "bench", time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		leases = append(leases, l)
	}
	cs := NewCursors(pool, schema)
	const n = 10000
	advs := make([]CursorAdvance, n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range advs {
			advs[k] = CursorAdvance{Lease: leases[k%16], Destination: fmt.Sprintf("t%05d", k), Partition: k % 16, Position: pos(uint64(i+1), 1)}
		}
		if _, err := cs.AdvanceMany(ctx, advs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/cursor")
}

// TestReleaseInstance: a dead process instance's leases (its own and its
// services', instance + "/" + service) are expired at once and taken over
// by another holder with a new term, and the old holding is fenced; a
// holder whose name merely starts with the same characters (another
// instance) keeps its lease.
func TestReleaseInstance(t *testing.T) {
	ctx := context.Background()
	_, ls, _ := migrated(t)
	dead := "host-41-aaaa1111"
	r := acquire(t, ls, "reader/slot", dead+"/reader", time.Minute)
	f := acquire(t, ls, "flusher/p0", dead+"/flusher", time.Minute)
	acquire(t, ls, "flusher/member/"+dead+"/flusher", dead+"/flusher", time.Minute)
	other := acquire(t, ls, "flusher/p1", dead+"0/flusher", time.Minute) // another instance, same prefix
	names, err := ls.ReleaseInstance(ctx, dead)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 3 {
		t.Fatalf("released %v, want the 3 leases of %s", names, dead)
	}
	for _, l := range []Lease{r, f} {
		n := acquire(t, ls, l.Name, "next/flusher", time.Minute)
		if n.Term != l.Term+1 {
			t.Fatalf("%s: term %d after the takeover, want %d", l.Name, n.Term, l.Term+1)
		}
		if ok, err := ls.Held(ctx, l); ok || err != nil {
			t.Fatalf("%s: the dead instance's holding is still live (ok=%v err=%v)", l.Name, ok, err)
		}
	}
	if ok, err := ls.Held(ctx, other); !ok || err != nil {
		t.Fatalf("another instance's lease was released (ok=%v err=%v)", ok, err)
	}
	if _, ok, _ := ls.Acquire(ctx, "flusher/p1", "next/flusher", time.Minute); ok {
		t.Fatal("another instance's lease could be taken")
	}
	for _, bad := range []string{"", "a/b"} {
		if _, err := ls.ReleaseInstance(ctx, bad); !errors.Is(err, ErrBadArgument) {
			t.Fatalf("ReleaseInstance(%q): %v, want ErrBadArgument", bad, err)
		}
	}
}
