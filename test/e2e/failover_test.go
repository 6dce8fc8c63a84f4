package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/shared/pgcluster"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

// failoverPair is a Postgres 17+ primary with a streaming standby that
// synchronizes failover slots (sync_replication_slots, hot_standby_feedback,
// primary_slot_name sb1, a dbname in primary_conninfo; the primary names sb1
// in synchronized_standby_slots), and a two-host DSN that reaches whichever
// of them accepts writes.
type failoverPair struct {
	primary, standby *pgcluster.Cluster
	dsn              string // both hosts, target_session_attrs=read-write
}

// startFailoverPair starts the pair with binaries of Postgres 17 or newer,
// which it finds itself (SLUICE_PG_BINDIR when it is 17+, else the cache
// deploy/fetch-postgres.sh fills): without them the test fails, it does not
// skip. syncSlots false leaves the standby without sync_replication_slots.
func startFailoverPair(t *testing.T, syncSlots bool) *failoverPair {
	t.Helper()
	bindir, err := pgcluster.BinDirAtLeast(17)
	if err != nil {
		t.Fatalf("failover needs Postgres 17+ server binaries: %v", err)
	}
	p, s := pgtest.Pair(t, pgtest.PairOptions{BinDir: bindir, Primary: map[string]string{"synchronized_standby_slots": "sb1"},
		Databases: []string{"app"}, Slot: "sb1", DB: "app", SyncSlots: syncSlots})
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/app?sslmode=disable&target_session_attrs=read-write", p.Port(), s.Port())
	return &failoverPair{primary: p, standby: s, dsn: dsn}
}

// readerStatus is the part of services.reader in `sluice status --json`
// the failover tests read.
type readerStatus struct {
	Failover *struct {
		Possible     bool     `json:"possible"`
		Why          []string `json:"why"`
		SlotFailover bool     `json:"slot_failover"`
	} `json:"failover"`
	SlotLost *struct {
		Why string `json:"why"`
	} `json:"slot_lost"`
	// Standby: decoding from a standby (standby_test.go).
	Standby *struct {
		Primary   string `json:"primary"`
		ReplayLSN string `json:"replay_lsn"`
		LagBytes  int64  `json:"lag_bytes"`
	} `json:"standby"`
}

func (s *sluice) readerStatus(t *testing.T) readerStatus {
	t.Helper()
	out, err := s.cli("status", "--json")
	if err != nil {
		t.Fatalf("sluice status --json: %v\n%s", err, out)
	}
	var st struct {
		Services struct {
			Reader readerStatus `json:"reader"`
		} `json:"services"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("decoding sluice status --json: %v\n%s", err, out)
	}
	return st.Services.Reader
}

// failoverRun: sluice dev on the pair's two-host DSN, rows copied by the
// backfill, then a steady load (inserts, updates, deletes over 20 tenants)
// through the two-host DSN; once the standby holds a synchronized copy of
// the slot (or, when wantSynced is false, after a few seconds), the primary
// is killed with SIGKILL under the load and the standby promoted; the load
// goes on against the new primary. It returns once a snapshot holds the
// new primary's current LSN.
func failoverRun(t *testing.T, syncSlots, wantSynced bool, env ...string) (*sluice, *pg, *failoverPair) {
	fp := startFailoverPair(t, syncSlots)
	src := &pg{t: t, dsn: fp.dsn}
	src.exec(`CREATE TABLE public.fo_events (tenant_id text NOT NULL, id bigint NOT NULL, v bigint NOT NULL, note text,
		PRIMARY KEY (tenant_id, id))`)
	src.exec(`INSERT INTO public.fo_events SELECT 't' || (g % 20), g, g, 'initial' FROM generate_series(1, 2000) g`)
	s, ctx := startLive(t, src, []string{"public.fo_events"}, env...)

	pool, err := pgxpool.New(ctx, fp.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var next atomic.Int64
	next.Store(2000)
	var committed, failed atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			lo := next.Add(20) - 19
			// Each transaction inserts 20 rows, moves one older row's
			// value and deletes another: every change kind in flight at
			// the kill.
			tx := fmt.Sprintf(`WITH ins AS (INSERT INTO public.fo_events SELECT 't' || (g %% 20), g, g, 'load' FROM generate_series(%d, %d) g),
				upd AS (UPDATE public.fo_events SET v = v + 1, note = 'updated' WHERE id = %d),
				del AS (DELETE FROM public.fo_events WHERE id = %d)
				SELECT 1`, lo, lo+19, 1+(i*7)%2000, 1+(i*13+5)%2000)
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := pool.Exec(cctx, tx)
			cancel()
			if err != nil {
				failed.Add(1) // the primary is down, or not yet replaced
				continue
			}
			committed.Add(1)
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()

	// The standby's copy of the slot is persisted once the primary's has
	// moved past what the standby holds: the reader's confirms do that.
	deadline := time.Now().Add(90 * time.Second)
	standby := &pg{t: t, dsn: fp.standby.DSN("app")}
	for wantSynced {
		got := standby.strings(`SELECT coalesce(string_agg(synced::text || '/' || temporary::text, ','), 'none') FROM pg_replication_slots WHERE slot_name = 'sluice_e2e'`)[0]
		if got == "true/false" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby never synchronized the slot (synced/temporary: %s)\n%s", got, s.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !wantSynced {
		time.Sleep(3 * time.Second)
	}
	time.Sleep(2 * time.Second) // under load a little longer
	if st := s.readerStatus(t); st.Failover != nil {
		t.Logf("the status before the kill: failover possible %v, slot failover %v, why %q", st.Failover.Possible, st.Failover.SlotFailover, st.Failover.Why)
	} else {
		t.Logf("the status before the kill shows no failover check")
	}
	before := committed.Load()
	if err := fp.primary.KillHard(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := fp.standby.Promote(pctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("primary killed after %d load transactions; standby promoted in %s", before, time.Since(killed).Round(time.Millisecond))
	// The load goes on against the new primary through the same DSN.
	for committed.Load() < before+50 {
		if time.Since(killed) > 90*time.Second {
			t.Fatalf("the load never committed on the new primary (%d failed)", failed.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	<-done
	t.Logf("load: %d transactions committed, %d failed (the kill and the promotion)", committed.Load(), failed.Load())
	lsn := src.lsn()
	if _, err := kit.Wait(ctx, s.server, lsn, 3*time.Minute); err != nil {
		t.Fatalf("no snapshot through %s after the failover: %v\n%s", lsn, err, s.tail())
	}
	t.Logf("snapshot through the new primary's %s %s after the kill", lsn, time.Since(killed).Round(time.Millisecond))
	return s, src, fp
}

// TestFailoverSameSlot: kill -9 of the primary under load and promotion of
// a standby that synchronizes the slot (Postgres 17+): the reader follows
// the two-host DSN to the new primary and resumes on the synchronized slot.
// Nothing is copied again (no slot_lost), and the oracle finds every
// tenant's copy equal to the new primary. Its negative control is
// TestNegativeFailoverNoSlotFailover (failover_unsafe_test.go).
func TestFailoverSameSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	s, src, _ := failoverRun(t, true, true)
	if rows, diffs := oracle(t, src, s, "public.fo_events", []string{"tenant_id", "id"}); len(diffs) > 0 {
		t.Fatalf("after the failover, %d rows checked, %d differences:\n%s", rows, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	} else {
		t.Logf("oracle: %d rows, 0 differences", rows)
	}
	if lost := s.dev.P.Grep("replication slot lost"); len(lost) > 0 {
		t.Fatalf("the failover copied every table again (slot_lost):\n%s", strings.Join(lost, "\n"))
	}
	if st := s.readerStatus(t); st.SlotLost != nil {
		t.Fatalf("the status shows a slot_lost: %s", st.SlotLost.Why)
	}
	if len(s.dev.P.Grep("failover possible")) == 0 {
		t.Errorf("the reader never logged that failover was possible before the kill")
	}
}
