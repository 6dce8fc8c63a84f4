package reader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/pgcluster"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/state"
)

// pgPair is a primary and a hot standby streaming from it (a physical
// slot, hot_standby_feedback on), each a cluster of its own.
type pgPair struct {
	primary, standby *pgcluster.Cluster
	major            int
}

// startPair starts a primary and its standby from bindir (a physical
// slot, hot_standby_feedback on); standbySettings are added to the
// standby's.
func startPair(t *testing.T, bindir string, standbySettings map[string]string) *pgPair {
	t.Helper()
	p, s := pgtest.Pair(t, pgtest.PairOptions{BinDir: bindir, Standby: standbySettings, Slot: "sluice_standby"})
	major, err := pgcluster.ServerMajor(bindir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Postgres %d primary on port %d, standby on port %d", major, p.Port(), s.Port())
	return &pgPair{primary: p, standby: s, major: major}
}

// database creates db on the primary, runs sql in it and waits until the
// standby has replayed both.
func (pp *pgPair) database(t *testing.T, db, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pp.primary.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if sql != "" {
		pgtest.Exec(t, pp.primary.DSN(db), sql)
	}
	pp.caughtUp(t, db)
}

// caughtUp waits until the standby has replayed the primary's WAL as it
// is now.
func (pp *pgPair) caughtUp(t *testing.T, db string) {
	t.Helper()
	ctx := context.Background()
	var at string
	if err := pgxQueryRow(ctx, pp.primary.DSN(db), `SELECT pg_current_wal_lsn()::text`, &at); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		var ok bool
		if err := pgxQueryRow(ctx, pp.standby.DSN(db), `SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn`, &ok, at); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the standby has not replayed %s yet", at)
		}
		return nil
	})
}

func pgxQueryRow(ctx context.Context, dsn, sql string, dst any, args ...any) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql, args...).Scan(dst)
}

// onStandby points the env's reader at the pair: source.dsn the standby,
// source.primary_dsn the primary (the state stays on the test cluster).
func (e *env) onStandby(pp *pgPair, db string) {
	e.cfg.Source.DSN = pp.standby.DSN(db)
	e.cfg.Source.PrimaryDSN = pp.primary.DSN(db)
}

// runRefused runs a reader to its refusal and returns it.
func (e *env) runRefused(t *testing.T) error {
	t.Helper()
	r := e.newReader("refused", nil)
	pool := e.statePool()
	defer pool.Close()
	r.deps.State = pool
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := r.Run(ctx)
	if !errors.Is(err, source.ErrInvalidSource) {
		t.Fatalf("the reader returned %v, want a refusal (ErrInvalidSource)", err)
	}
	return err
}

// TestStandbyRefusals: what the reader refuses at start, before it writes
// anything, when source.dsn reaches a standby (Postgres 16+) or
// source.primary_dsn does not fit, each message saying what to set; the
// primary with source.primary_dsn naming itself is accepted (the control).
func TestStandbyRefusals(t *testing.T) {
	bindir := pgtest.NeedBinaries(t, func() (string, error) { return pgcluster.BinDirAtLeast(source.StandbyVersion) })
	pp := startPair(t, bindir, nil)
	pp.database(t, "app", schemaSQL)
	other := pgtest.NewDB(t) // another cluster
	ctx := context.Background()
	check := func(dsn, primary string) error {
		t.Helper()
		src, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		ver, err := source.ReadServerVersion(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		var pri source.Querier
		if primary != "" {
			p, err := pgxpool.New(ctx, primary)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			pri = p
		}
		_, err = source.CheckRole(ctx, src, ver, pri)
		return err
	}

	t.Run("no_primary_dsn", func(t *testing.T) {
		// The whole reader: refused at start, today's text kept, the new
		// key named.
		e := newEnv(t, "public.items")
		e.cfg.Source.DSN = pp.standby.DSN("app")
		err := e.runRefused(t)
		for _, want := range []string{"connects to a standby", "target_session_attrs=read-write", "source.primary_dsn"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal %q does not say %q", err, want)
			}
		}
		if n := slotsOn(t, pp.standby.DSN("app")); n != 0 {
			t.Errorf("the refused reader left %d logical slots on the standby", n)
		}
	})
	for _, tc := range []struct {
		name, dsn, primary, want string
	}{
		{"primary_dsn_is_a_standby", pp.standby.DSN("app"), pp.standby.DSN("app"), "source.primary_dsn connects to a standby"},
		{"primary_dsn_another_cluster", pp.standby.DSN("app"), other, "another cluster"},
		{"primary_with_another_primary_dsn", pp.primary.DSN("app"), other, "leave source.primary_dsn unset"},
		{"primary_with_its_own_primary_dsn", pp.primary.DSN("app"), pp.primary.DSN("app"), ""},
		{"standby_with_primary_dsn", pp.standby.DSN("app"), pp.primary.DSN("app"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := check(tc.dsn, tc.primary)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, source.ErrInvalidSource) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckRole = %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
	t.Run("hot_standby_feedback_off", func(t *testing.T) {
		pgtest.Exec(t, pp.standby.DSN("app"), `ALTER SYSTEM SET hot_standby_feedback = off`)
		pgtest.Exec(t, pp.standby.DSN("app"), `SELECT pg_reload_conf()`)
		t.Cleanup(func() {
			pgtest.Exec(t, pp.standby.DSN("app"), `ALTER SYSTEM RESET hot_standby_feedback`)
			pgtest.Exec(t, pp.standby.DSN("app"), `SELECT pg_reload_conf()`)
		})
		var err error
		eventually(t, 10*time.Second, func() error {
			if err = check(pp.standby.DSN("app"), pp.primary.DSN("app")); err == nil {
				return errors.New("accepted")
			}
			return nil
		})
		if !errors.Is(err, source.ErrInvalidSource) || !strings.Contains(err.Error(), "hot_standby_feedback = on") {
			t.Fatalf("CheckRole = %v, want a refusal naming hot_standby_feedback = on", err)
		}
	})
}

// TestStandbyPromoted: the standby the reader decodes from is promoted
// while source.primary_dsn still names the old primary (which the
// watermarks would go to, never reaching the stream): the reader stops
// capturing and its restart refuses the pair, saying what to set; before
// the promotion the same configuration streams (the control).
func TestStandbyPromoted(t *testing.T) {
	bindir := pgtest.NeedBinaries(t, func() (string, error) { return pgcluster.BinDirAtLeast(source.StandbyVersion) })
	pp := startPair(t, bindir, nil)
	pp.database(t, "app", schemaSQL)
	e := newEnv(t, "public.items")
	e.onStandby(pp, "app")
	r := e.newReader("a", func(r *Reader) { r.pollEvery = 100 * time.Millisecond })
	pool := e.statePool()
	defer pool.Close()
	r.deps.State = pool
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	eventually(t, 30*time.Second, func() error {
		if s := r.Status(); s.State != "streaming" || s.Standby == nil {
			return fmt.Errorf("state %s, standby %+v (%s)", s.State, s.Standby, s.LastError)
		}
		return nil
	})
	if err := pp.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, source.ErrInvalidSource) || !strings.Contains(err.Error(), "timeline") || !strings.Contains(err.Error(), "source.primary_dsn") {
			t.Fatalf("after the promotion the reader returned %v, want the refusal naming the timelines and source.primary_dsn", err)
		}
		t.Logf("refused after the promotion: %v", err)
	case <-time.After(90 * time.Second):
		t.Fatal("the reader went on decoding from the promoted standby with source.primary_dsn naming the old primary")
	}
	// The fix the message names: source.primary_dsn unset, the promoted
	// server is the primary. Its slot, made while it was a standby, is
	// still there: the reader resumes on it, nothing copied again.
	pgtest.Exec(t, pp.standby.DSN("app"), `INSERT INTO items VALUES ('t1', 1, 'after')`)
	e.cfg.Source.PrimaryDSN = ""
	run := e.start(e.newReader("b", nil))
	eventually(t, 30*time.Second, func() error {
		if got := e.folded("")["public.items|t1|1"]; got != "after" {
			return fmt.Errorf("the row written after the promotion: %q (state %s, %s)", got, run.r.Status().State, run.r.Status().LastError)
		}
		return nil
	})
	if st := run.r.Status(); st.SlotLost != nil || st.Standby != nil {
		t.Errorf("on the promoted server: slot_lost %+v, standby %+v", st.SlotLost, st.Standby)
	}
}

// slotsOn counts the logical slots of a server.
func slotsOn(t *testing.T, dsn string) int {
	t.Helper()
	var n int
	if err := pgxQueryRow(context.Background(), dsn, `SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical'`, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// binDirBelow16 is a folder of Postgres 14 or 15 server binaries.
func binDirBelow16() (string, error) {
	dirs := []string{os.Getenv("SLUICE_PG_BINDIR"), "/usr/lib/postgresql/15/bin", filepath.Join(pgcluster.CacheDir, "15", "bin"), filepath.Join(pgcluster.CacheDir, "14", "bin")}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if v, err := pgcluster.ServerMajor(d); err == nil && v >= source.MinServerMajor && v < source.StandbyVersion {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: no Postgres 14 or 15 (looked in %s)", pgcluster.ErrNoBinaries, strings.Join(dirs[1:], ", "))
}

// TestStandbyRefusedBefore16: a standby of Postgres 15 (or 14) with
// source.primary_dsn set is refused at start with a message naming its
// version and the version decoding from a standby needs.
func TestStandbyRefusedBefore16(t *testing.T) {
	bindir := pgtest.NeedBinaries(t, binDirBelow16)
	pp := startPair(t, bindir, nil)
	pp.database(t, "app", schemaSQL)
	e := newEnv(t, "public.items")
	e.onStandby(pp, "app")
	err := e.runRefused(t)
	want, _ := pgcluster.Version(bindir)
	for _, s := range []string{"standby of Postgres " + want, "Postgres 16 or newer"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the refusal %q does not say %q", err, s)
		}
	}
}

// enqueueResync queues a resync of the whole table.
func (e *env) enqueueResync(q *state.Resyncs, table string) state.Resync {
	e.t.Helper()
	req, err := q.Enqueue(context.Background(), e.cfg.Source.Slot, table, "", nil, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return req
}

// foldedVW is the CHANGES stream applied by position as key -> v|w.
func (e *env) foldedVW() map[string]string {
	rows, _, _ := e.changes()
	out := map[string]string{}
	for k, r := range apply(rows, "tenant_id", "id") {
		out[k] = fmt.Sprintf("%v|%v", r.vals["v"], r.vals["w"])
	}
	return out
}

// sourceVW reads public.items on dsn as key -> v|w, as foldedVW renders
// them (w NULL before the column exists).
func sourceVW(t *testing.T, dsn string, hasW bool) map[string]string {
	t.Helper()
	w := "NULL::text"
	if hasW {
		w = "w"
	}
	var js string
	if err := pgxQueryRow(context.Background(), dsn, `SELECT coalesce(jsonb_object_agg('public.items|' || tenant_id || '|' || id,
		coalesce(v, '<nil>') || '|' || coalesce(`+w+`, '<nil>')), '{}')::text FROM items`, &js); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	if err := json.Unmarshal([]byte(js), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStandbySource: the reader decodes from a hot standby (Postgres 16+)
// and writes to its primary: the backfill at the standby slot's exported
// snapshot, a stream under a load of inserts, updates, deletes and tenant
// moves on the primary, a live resync, a TRUNCATE and an ALTER TABLE ADD
// COLUMN with a default (the reader resyncs the table by itself) give,
// applied by position, the primary's table. The slot is on the standby and
// none on the primary; the status says where the reader writes.
func TestStandbySource(t *testing.T) {
	bindir := pgtest.NeedBinaries(t, func() (string, error) { return pgcluster.BinDirAtLeast(source.StandbyVersion) })
	pp := startPair(t, bindir, nil)
	pp.database(t, "app", schemaSQL+`INSERT INTO items SELECT 't' || (g % 7), g, 'b' || g FROM generate_series(1, 3000, 7) g; ANALYZE items;`)
	pdsn := pp.primary.DSN("app")
	e := newEnv(t, "public.items")
	e.onStandby(pp, "app")
	e.cfg.Source.Backfill = true
	e.cfg.Source.ResyncChunkRows = 200
	run := e.start(e.newReader("a", func(r *Reader) {
		r.resyncPoll = 20 * time.Millisecond
		r.schemaEvery = 200 * time.Millisecond
		r.pollEvery = 200 * time.Millisecond
	}))
	eventually(t, 60*time.Second, func() error {
		if s := run.r.Status().State; s != "streaming" {
			return fmt.Errorf("state %s (%s)", s, run.r.Status().LastError)
		}
		return nil
	})
	ctx, stopLoad := context.WithCancel(context.Background())
	var inserted atomic.Int64
	loadDone := make(chan struct{})
	go func() { defer close(loadDone); workloadFrom(ctx, t, pdsn, &inserted, 3001) }()
	defer func() { stopLoad(); <-loadDone }()
	eventually(t, 30*time.Second, func() error {
		if inserted.Load() < 200 {
			return fmt.Errorf("%d rows inserted", inserted.Load())
		}
		return nil
	})

	q := state.NewResyncs(run.pool, e.cfg.State.Schema)
	req := e.enqueueResync(q, "public.items")
	done := waitResync(t, q, req.ID)
	t.Logf("resync under load: %d chunks, %d rows, %d dropped", done.Chunks, done.Rows, done.Dropped)

	pgtest.Exec(t, pdsn, `TRUNCATE items`)
	at := inserted.Load()
	eventually(t, 30*time.Second, func() error {
		if inserted.Load() < at+100 {
			return fmt.Errorf("%d rows inserted after the TRUNCATE", inserted.Load()-at)
		}
		return nil
	})
	pgtest.Exec(t, pdsn, `ALTER TABLE items ADD COLUMN w text DEFAULT 'd'`)
	// The column's default rewrote every row without WAL: the reader
	// queues a resync of the table by itself.
	var auto state.Resync
	eventually(t, 60*time.Second, func() error {
		list, err := q.List(context.Background(), e.cfg.Source.Slot, 100)
		if err != nil {
			return err
		}
		for _, r := range list {
			if r.ID != req.ID && strings.HasPrefix(r.Reason, "schema_change") {
				auto = r
				return nil
			}
		}
		return errors.New("no schema_change resync queued")
	})
	waitResync(t, q, auto.ID)
	at = inserted.Load()
	eventually(t, 30*time.Second, func() error {
		if inserted.Load() < at+100 {
			return fmt.Errorf("%d rows inserted after the ALTER", inserted.Load()-at)
		}
		return nil
	})
	stopLoad()
	<-loadDone

	pp.caughtUp(t, "app")
	want := sourceVW(t, pdsn, true)
	var got error
	eventually(t, 60*time.Second, func() error {
		got = diff(want, e.foldedVW())
		return got
	})
	st := run.r.Status()
	if st.Standby == nil || st.Standby.Primary != hostOf(pdsn) || st.Standby.ReplayLSN == "" {
		t.Errorf("status of a standby source: %+v", st.Standby)
	}
	if strings.Contains(fmt.Sprint(st.Standby), "@") {
		t.Errorf("the status names more than the primary's host: %+v", st.Standby)
	}
	if n := slotsOn(t, pdsn); n != 0 {
		t.Errorf("%d logical slots on the primary, want none (the reader's is on the standby)", n)
	}
	if n := slotsOn(t, pp.standby.DSN("app")); n != 1 {
		t.Errorf("%d logical slots on the standby, want the reader's", n)
	}
	waits, waited := histCount(t, run.r.metrics.ReplayWait)
	if waits == 0 {
		t.Errorf("no resync chunk waited for the standby's replay")
	}
	t.Logf("%d rows compared, %d inserted by the load; chunks read after the replay wait: %d, %.3f s waited in all", len(want), inserted.Load(), waits, waited)
}

// histCount is the number of observations of h and their sum.
func histCount(t *testing.T, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// TestStandbyReplayWait: the rule that a resync chunk on a standby is read
// only once the standby has replayed the chunk's low watermark (written on
// the primary). The standby applies every commit 1.5 s late
// (recovery_min_apply_delay); every row is updated on the primary and a
// resync starts at once, so its first LW is written while the update is not
// yet applied on the standby. With the wait the chunk sees the update and
// nothing is copied again. Without it (rules.noReplayWait) the chunk misses
// the update: the stream's visibility check still catches it (the update's
// xid is among the table's last transactions, committed before the LW) and
// the chunk is copied again; without that check as well
// (NoHighWatermarkCheckForTest) the chunk's stale rows are published over
// the update: the negative control.
func TestStandbyReplayWait(t *testing.T) {
	bindir := pgtest.NeedBinaries(t, func() (string, error) { return pgcluster.BinDirAtLeast(source.StandbyVersion) })
	pp := startPair(t, bindir, map[string]string{"recovery_min_apply_delay": "1500ms"})
	for i, tc := range []struct {
		name            string
		noWait, noCheck bool
	}{{"wait", false, false}, {"no_wait", true, false}, {"no_wait_no_check", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			db := fmt.Sprintf("rw%d", i)
			pp.database(t, db, schemaSQL+`INSERT INTO items SELECT 't' || (g % 3), g, 'v' || g FROM generate_series(1, 60) g; ANALYZE items;`)
			pdsn := pp.primary.DSN(db)
			e := newEnv(t, "public.items")
			e.onStandby(pp, db)
			e.cfg.Source.Slot = "sluice_" + db // one cluster for every subtest
			e.cfg.Source.Backfill = false
			e.cfg.Source.ResyncChunkRows = 1000
			run := e.start(e.newReader("a", func(r *Reader) {
				r.resyncPoll = 10 * time.Millisecond
				r.rules.noReplayWait = tc.noWait
				r.resync.NoHighWatermarkCheckForTest = tc.noCheck
			}))
			waitStreaming(t, run)
			q := state.NewResyncs(run.pool, e.cfg.State.Schema)
			pgtest.Exec(t, pdsn, `UPDATE items SET v = 'updated'`)
			req := e.enqueueResync(q, "public.items")
			waitResync(t, q, req.ID)
			pp.caughtUp(t, db)
			want := sourceItems(t, pdsn)
			var got error
			eventually(t, 30*time.Second, func() error {
				got = diff(want, e.folded(""))
				if tc.noCheck && got != nil {
					return nil
				}
				return got
			})
			retries := testutil.ToFloat64(run.r.metrics.ResyncRetries.WithLabelValues("public.items", "unsafe"))
			waits, waited := histCount(t, run.r.metrics.ReplayWait)
			t.Logf("chunks copied again: %v; replay waits: %d (%.3f s); difference: %v", retries, waits, waited, got)
			switch {
			case !tc.noWait:
				if retries != 0 || waits == 0 {
					t.Errorf("with the replay wait: %v chunks copied again (want 0), %d waits (want some)", retries, waits)
				}
			case !tc.noCheck:
				if retries == 0 {
					t.Errorf("without the replay wait the visibility check copied no chunk again: the chunk saw the update anyway, so this run does not exercise the wait")
				}
			default:
				if got == nil {
					t.Fatal("negative control: without the replay wait and the visibility check, the chunk's stale rows did not overwrite the update")
				}
				t.Logf("negative control, as expected: %v", got)
			}
		})
	}
}
