package state

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/proto"
)

// zombieManyScenario: a zombie (a, term 1) and the new owner of another
// partition write one batch; the zombie's row must be refused while the
// live row lands.
func zombieManyScenario(t *testing.T, pool *pgxpool.Pool, ls *Leases, cs *Cursors) ([]AdvanceResult, proto.Position, proto.Position) {
	t.Helper()
	ctx := context.Background()
	a := acquire(t, ls, "flusher-p3", "a", time.Minute)
	live := acquire(t, ls, "flusher-p5", "a", time.Minute)
	res, err := cs.AdvanceMany(ctx, []CursorAdvance{{a, "shop1", 3, pos(100, 1)}, {live, "shop9", 5, pos(10, 1)}})
	if err != nil || !res[0].Advanced || !res[1].Advanced {
		t.Fatalf("owner advance: %v %+v", err, res)
	}
	expire(t, pool, "flusher-p3")
	b := acquire(t, ls, "flusher-p3", "b", time.Minute)
	if ok, err := cs.Advance(ctx, b, "shop1", 3, pos(150, 1)); !ok || err != nil {
		t.Fatalf("new owner advance: %v %v", ok, err)
	}
	res, err = cs.AdvanceMany(ctx, []CursorAdvance{{a, "shop1", 3, pos(200, 7)}, {live, "shop9", 5, pos(20, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ := cs.Get(ctx, "shop1")
	other, _, _ := cs.Get(ctx, "shop9")
	return res, got, other
}

func TestAdvanceManyZombieIsFenced(t *testing.T) {
	pool, ls, cs := migrated(t)
	res, got, other := zombieManyScenario(t, pool, ls, cs)
	if !errors.Is(res[0].Err, ErrLeaseLost) || res[0].Advanced {
		t.Fatalf("zombie row: %+v, want ErrLeaseLost", res[0])
	}
	if got != pos(150, 1) {
		t.Fatalf("cursor %s after the zombie's batch, want the owner's 0/96:1", got)
	}
	if !res[1].Advanced || res[1].Err != nil || other != pos(20, 1) {
		t.Fatalf("live row in the same batch: %+v, cursor %s", res[1], other)
	}
	// An expired lease with no successor fences as well.
	expire(t, pool, "flusher-p5")
	live := Lease{Name: "flusher-p5", Holder: "a", Term: 1}
	res, err := cs.AdvanceMany(context.Background(), []CursorAdvance{{live, "shop9", 5, pos(30, 1)}})
	if err != nil || !errors.Is(res[0].Err, ErrLeaseLost) {
		t.Fatalf("expired lease batch: %v %+v", err, res)
	}
}

// Negative control: without the fence the zombie's row lands.
func TestAdvanceManyZombieNegativeControlWithoutFence(t *testing.T) {
	pool, ls, cs := migrated(t)
	res, got, _ := zombieManyScenario(t, pool, ls, cs.withoutSafety(true, false))
	if res[0].Err != nil || got != pos(200, 7) {
		t.Fatalf("without the fence the zombie should win: %+v cursor=%s", res[0], got)
	}
}

// staleManyScenario advances d1 to 0/C8:5 then writes older positions in
// batches, alongside a row that does advance.
func staleManyScenario(t *testing.T, ls *Leases, cs *Cursors) proto.Position {
	t.Helper()
	ctx := context.Background()
	l := acquire(t, ls, "flusher-p0", "a", time.Minute)
	if res, err := cs.AdvanceMany(ctx, []CursorAdvance{{l, "d1", 0, pos(200, 5)}}); err != nil || !res[0].Advanced {
		t.Fatalf("advance: %v %+v", err, res)
	}
	for i, p := range []proto.Position{pos(200, 4), pos(199, 9), pos(0, 0)} {
		res, err := cs.AdvanceMany(ctx, []CursorAdvance{{l, "d1", 0, p}, {l, "d2", 0, pos(uint64(i+1), 0)}})
		if err != nil {
			t.Fatalf("stale write %s: %v", p, err)
		}
		if res[0].Err != nil || (res[0].Advanced && !cs.noMonotonic) {
			t.Fatalf("stale write %s: %+v", p, res[0])
		}
		if !res[1].Advanced {
			t.Fatalf("fresh row beside a stale one: %+v", res[1])
		}
	}
	got, _, err := cs.Get(ctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestAdvanceManyMonotonicGuard(t *testing.T) {
	_, ls, cs := migrated(t)
	if got := staleManyScenario(t, ls, cs); got != pos(200, 5) {
		t.Fatalf("cursor moved back to %s", got)
	}
	if got, _, _ := cs.Get(context.Background(), "d2"); got != pos(3, 0) {
		t.Fatalf("d2 at %s", got)
	}
}

// Negative control: without the guard a stale batch row moves the cursor back.
func TestAdvanceManyMonotonicNegativeControlWithoutGuard(t *testing.T) {
	_, ls, cs := migrated(t)
	if got := staleManyScenario(t, ls, cs.withoutSafety(false, true)); got == pos(200, 5) {
		t.Fatalf("without the guard the stale writes should have moved the cursor back, it is %s", got)
	}
}

func TestAdvanceManyArguments(t *testing.T) {
	_, ls, cs := migrated(t)
	ctx := context.Background()
	l := acquire(t, ls, "flusher-p1", "a", time.Minute)
	if res, err := cs.AdvanceMany(ctx, nil); err != nil || res != nil {
		t.Fatalf("empty batch: %v %v", res, err)
	}
	if _, err := cs.AdvanceMany(ctx, []CursorAdvance{{l, "d1", 1, pos(1, 1)}, {l, "d1", 1, pos(2, 1)}}); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("duplicate destination: %v", err)
	}
	if _, err := cs.AdvanceMany(ctx, []CursorAdvance{{l, "no good", 1, pos(1, 1)}}); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("bad destination: %v", err)
	}
	if _, err := cs.AdvanceMany(ctx, []CursorAdvance{{l, "d1", 1, proto.Position{LSN: 1 << 63}}}); !errors.Is(err, ErrPositionRange) {
		t.Fatalf("position range: %v", err)
	}
	if m, err := cs.Load(ctx, 1); err != nil || len(m) != 0 {
		t.Fatalf("a refused batch wrote %v (%v)", m, err)
	}
}

// A takeover waits for an in-flight AdvanceMany (its leases are locked FOR
// SHARE), with the negative control without the lock.
func takeoverManyRace(t *testing.T, pool *pgxpool.Pool, ls *Leases, cs *Cursors) bool {
	t.Helper()
	ctx := context.Background()
	a := acquire(t, ls, "flusher-p4", "a", 300*time.Millisecond)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	res, err := cs.advanceMany(ctx, tx, []CursorAdvance{{a, "d4", 4, pos(500, 1)}, {a, "d5", 4, pos(501, 1)}})
	if err != nil || !res[0].Advanced || !res[1].Advanced {
		t.Fatalf("advance in tx: %v %+v", err, res)
	}
	waitUntil(t, func() bool {
		var expired bool
		err := pool.QueryRow(ctx, `SELECT expires_at <= now() FROM sluice.leases WHERE name = 'flusher-p4'`).Scan(&expired)
		return err == nil && expired
	})
	done := make(chan error, 1)
	go func() {
		_, ok, err := ls.Acquire(ctx, "flusher-p4", "b", time.Minute)
		if err == nil && !ok {
			err = errors.New("not acquired")
		}
		done <- err
	}()
	finished := false
	waitUntil(t, func() bool {
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
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
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	return finished
}

func TestTakeoverWaitsForInflightAdvanceMany(t *testing.T) {
	pool, ls, cs := migrated(t)
	if takeoverManyRace(t, pool, ls, cs) {
		t.Fatal("takeover completed while the old owner's fenced batch was uncommitted")
	}
	m, err := cs.Load(context.Background(), 4)
	if err != nil || m["d4"] != pos(500, 1) || m["d5"] != pos(501, 1) {
		t.Fatalf("new owner sees %v (err %v)", m, err)
	}
}

func TestTakeoverNegativeControlWithoutShareLockMany(t *testing.T) {
	pool, ls, cs := migrated(t)
	nl := &Cursors{pool: cs.pool, schema: cs.schema, noShareLock: true}
	nl.build()
	if !takeoverManyRace(t, pool, ls, nl) {
		t.Fatal("without FOR SHARE the takeover should not have waited")
	}
}
