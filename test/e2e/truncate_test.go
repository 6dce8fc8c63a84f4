package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

// truncateTenants are the load's tenants; oldTenants exist only before
// the first TRUNCATE, so their copies must end empty.
const truncateTenants = 40

var oldTenants = []string{"old0", "old1", "old2", "old3", "old4", "old5"}

// truncateRun drives TRUNCATEs mid-stream under a steady insert load and
// returns the oracle's report of both tables (every tenant ever written,
// so a tenant the truncates emptied must read empty): TRUNCATE … CASCADE
// of a parent (the child goes with it), a multi-table TRUNCATE … RESTART
// IDENTITY inside a transaction with inserts before and after it, the
// pipeline killed -9 right after it and restarted (its flusher then knows
// the destinations only by their persisted cursors), and a TRUNCATE of the
// child alone. Destinations go idle and are evicted from the flusher's
// memory in between (delivery.idle_evict 1s). env adds SLUICE_* overrides.
func truncateRun(t *testing.T, env ...string) (kit.Report, *sluice) {
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.tr_parent (tenant_id text NOT NULL, id bigint NOT NULL, v bigint NOT NULL, PRIMARY KEY (tenant_id, id));
		CREATE TABLE public.tr_child (tenant_id text NOT NULL, id bigint NOT NULL, pid bigint NOT NULL, note text,
			PRIMARY KEY (tenant_id, id), FOREIGN KEY (tenant_id, pid) REFERENCES public.tr_parent);
		CREATE SEQUENCE public.tr_seq;
		INSERT INTO public.tr_parent SELECT 'old' || (g % 6), g, g FROM generate_series(1, 300) g;
		INSERT INTO public.tr_child SELECT 'old' || (g % 6), g, g, 'seed' FROM generate_series(1, 300) g;`)
	s := newSluice(t, src.dsn, []string{"public.tr_parent", "public.tr_child"}, append([]string{"SLUICE_DELIVERY_IDLE_EVICT=1s"}, env...)...)
	t.Cleanup(func() { artifacts(t, s.dev.Dir) })
	s.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("pipeline never live: %v\n%s", err, s.tail())
	}

	pool, err := pgxpool.New(ctx, src.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var next atomic.Int64
	next.Store(1000)
	var loadErr atomic.Value
	stop := make(chan struct{})
	done := make(chan struct{})
	// Each transaction inserts 20 parents and a child of each.
	insert := `INSERT INTO public.tr_parent SELECT 't' || (g % $3), g, g * 3 FROM generate_series($1::bigint, $2::bigint) g;`
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			lo := next.Add(20) - 20
			tx, err := pool.Begin(ctx)
			if err == nil {
				if _, err = tx.Exec(ctx, insert, lo, lo+19, truncateTenants); err == nil {
					_, err = tx.Exec(ctx, `INSERT INTO public.tr_child SELECT 't' || (g % $3), g, g, 'c' FROM generate_series($1::bigint, $2::bigint) g`, lo, lo+19, truncateTenants)
				}
				if err == nil {
					err = tx.Commit(ctx)
				} else {
					_ = tx.Rollback(ctx)
				}
			}
			if err != nil {
				loadErr.Store(err)
				return
			}
		}
	}()
	pause := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-done:
		}
	}
	pause(3 * time.Second)
	src.exec(`TRUNCATE public.tr_parent CASCADE`)
	pause(3 * time.Second) // idle destinations (the old ones) are evicted meanwhile
	lo := next.Add(40) - 40
	// The locks first, in the load's order (parent, child): the TRUNCATE
	// would otherwise take the child's after the insert took the parent's.
	src.exec(fmt.Sprintf(`BEGIN;
		LOCK TABLE public.tr_parent, public.tr_child IN ACCESS EXCLUSIVE MODE;
		INSERT INTO public.tr_parent SELECT 'tx' || (g %% 5), g, nextval('public.tr_seq') FROM generate_series(%d, %d) g;
		TRUNCATE public.tr_child, public.tr_parent RESTART IDENTITY;
		INSERT INTO public.tr_parent SELECT 'tx' || (g %% 5), g, nextval('public.tr_seq') FROM generate_series(%d, %d) g;
		INSERT INTO public.tr_child SELECT 'tx' || (g %% 5), g, g, 'after' FROM generate_series(%d, %d) g;
		COMMIT`, lo, lo+19, lo+20, lo+39, lo+20, lo+39))
	s.dev.P.Kill()
	s.start()
	pause(3 * time.Second)
	src.exec(`TRUNCATE public.tr_child`)
	pause(2 * time.Second)
	close(stop)
	<-done
	if err, _ := loadErr.Load().(error); err != nil {
		t.Fatalf("load: %v", err)
	}
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("sluice wait after the truncates (a halt exits 2): %v\n%s", err, s.tail())
	}
	// The restart proved its predecessor dead (data_dir's lock) and took
	// over what it held at once (ARCHITECTURE.md "Recovery after a crash").
	// (Its reader and flusher leases are always live while it runs.)
	if want := "released the leases the previous sluice dev held"; len(s.dev.P.Grep(want)) == 0 {
		t.Errorf("the restart after kill -9 never logged %q\n%s", want, s.tail())
	}
	tenants := append([]string{}, oldTenants...)
	for i := range truncateTenants {
		tenants = append(tenants, fmt.Sprintf("t%d", i))
	}
	for i := range 5 {
		tenants = append(tenants, fmt.Sprintf("tx%d", i))
	}
	rep, err := kit.Check(ctx, src.dsn, s.server, kit.CheckOptions{Tenants: tenants, Tables: []kit.Table{
		{Name: "public.tr_parent", Keys: []string{"tenant_id", "id"}, Routing: "tenant_id"},
		{Name: "public.tr_child", Keys: []string{"tenant_id", "id"}, Routing: "tenant_id"},
	}})
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	t.Logf("%d rows loaded; %s", next.Load()-1000, rep)
	return rep, s
}

// TestTruncateMidStream: TRUNCATE is applied, not halted (issue 14 item
// 4). Every tenant's copy of both tables equals the source after the
// truncates above: rows before each TRUNCATE gone, rows after it (in the
// same transaction too) kept, no halt (`sluice wait` exits 0). The
// negative control, TestNegativeIgnoreClears (truncate_unsafe_test.go),
// runs the same with reads that ignore clears and must find the old rows.
func TestTruncateMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	rep, s := truncateRun(t)
	if !rep.OK() {
		t.Fatalf("%d differences:\n%s\n%s", len(rep.Diffs), strings.Join(rep.Diffs, "\n"), s.tail())
	}
	if rep.Rows == 0 {
		t.Fatal("the oracle read no rows: the load wrote nothing after the truncates")
	}
	if st, err := s.cli("status"); err != nil || strings.Contains(st, "halted") && strings.Contains(st, "tr_") {
		t.Errorf("status after the truncates: %v\n%s", err, st)
	}
}
