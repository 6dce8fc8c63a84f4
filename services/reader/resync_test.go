package reader

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/state"
)

// sourceItems reads public.items as tenant|id -> v.
func sourceItems(t *testing.T, dsn string) map[string]string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT tenant_id, id, coalesce(v, '<nil>') FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var tn, v string
		var id int64
		if err := rows.Scan(&tn, &id, &v); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("public.items|%s|%d", tn, id)] = v
	}
	return out
}

// folded is the CHANGES stream applied by position (apply: clears
// included), as tenant|id -> v.
func (e *env) folded(only string) map[string]string {
	rows, _, _ := e.changes()
	out := map[string]string{}
	for k, r := range apply(rows, "tenant_id", "id") {
		if only != "" && r.vals["tenant_id"] != only {
			continue
		}
		v := "<nil>"
		if s, ok := r.vals["v"].(string); ok {
			v = s
		}
		out[k] = v
	}
	return out
}

func diff(want, got map[string]string) error {
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("%s: stream has %q, source %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			return fmt.Errorf("%s: in the stream, not at the source", k)
		}
	}
	return nil
}

func waitResync(t *testing.T, q *state.Resyncs, id int64) state.Resync {
	t.Helper()
	var r state.Resync
	eventually(t, 60*time.Second, func() error {
		var err error
		if r, err = q.Get(context.Background(), id); err != nil {
			return err
		}
		if r.State == state.ResyncFailed {
			t.Fatalf("resync failed: %s", r.Error)
		}
		if r.State != state.ResyncDone {
			return fmt.Errorf("resync %s after %d chunks", r.State, r.Chunks)
		}
		return nil
	})
	return r
}

// TestResyncHighWatermark: a live resync copies a table that was never
// backfilled in chunks while it streams; a row of a chunk is updated
// between the chunk's SELECT and its high watermark (the window DBLog
// guards). Applied by position, the stream equals the source: the chunk's
// copy of that row was dropped for the stream's update. The negative control
// (no high-watermark check) reads the stale copy.
func TestResyncHighWatermark(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		t.Run(fmt.Sprintf("unsafe=%v", unsafe), func(t *testing.T) {
			e := newEnv(t, "public.items")
			e.cfg.Source.ResyncChunkRows = 50
			e.exec(schemaSQL + `INSERT INTO items SELECT 't' || (g % 3), g, 'v' || g FROM generate_series(1, 400) g; ANALYZE items;`)
			touched := 0
			run := e.start(e.newReader("a", func(r *Reader) {
				r.resyncPoll = 20 * time.Millisecond
				r.resync.NoHighWatermarkCheckForTest = unsafe
				r.beforeHighWatermark = func(table string, rows [][][]byte) {
					if len(rows) == 0 || touched >= 3 {
						return
					}
					touched++
					// The chunk's first row changes after the SELECT read it.
					e.exec(fmt.Sprintf(`UPDATE items SET v = 'window%d' WHERE tenant_id = '%s' AND id = %s`, touched, rows[0][0], rows[0][1]))
				}
			}))
			eventually(t, 20*time.Second, func() error {
				if st := run.r.Status().State; st != "streaming" {
					return fmt.Errorf("state %s", st)
				}
				return nil
			})
			q := state.NewResyncs(run.pool, e.cfg.State.Schema)
			req, err := q.Enqueue(context.Background(), e.cfg.Source.Slot, "public.items", "", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			done := waitResync(t, q, req.ID)
			if done.Chunks != 9 || done.Rows+done.Dropped != 400 {
				t.Errorf("resync: %d chunks, %d rows copied, %d dropped; want 9 chunks, 400 rows", done.Chunks, done.Rows, done.Dropped)
			}
			end, err := proto.ParseLSN(done.EndLSN)
			if err != nil || end == 0 {
				t.Fatalf("end_lsn %q: %v", done.EndLSN, err)
			}
			want := sourceItems(t, e.dsn)
			var got error
			eventually(t, 20*time.Second, func() error {
				got = diff(want, e.folded(""))
				if unsafe && got != nil {
					return nil // settled stale
				}
				return got
			})
			if unsafe {
				if got == nil {
					t.Fatal("negative control: without the high-watermark check the stream still equals the source")
				}
				t.Logf("negative control, as expected: %v", got)
				return
			}
			if done.Dropped != 3 {
				t.Errorf("%d rows dropped from chunks, want 3 (the rows updated inside a window)", done.Dropped)
			}
		})
	}
}

// TestResyncOneDestination: a per-destination resync copies only the rows
// of its routing value.
func TestResyncOneDestination(t *testing.T) {
	e := newEnv(t, "public.items")
	e.cfg.Source.ResyncChunkRows = 64
	e.exec(schemaSQL + `INSERT INTO items SELECT 't' || (g % 3), g, 'v' || g FROM generate_series(1, 300) g;`)
	run := e.start(e.newReader("a", func(r *Reader) { r.resyncPoll = 20 * time.Millisecond }))
	eventually(t, 20*time.Second, func() error {
		if st := run.r.Status().State; st != "streaming" {
			return fmt.Errorf("state %s", st)
		}
		return nil
	})
	q := state.NewResyncs(run.pool, e.cfg.State.Schema)
	v := "t1"
	req, err := q.Enqueue(context.Background(), e.cfg.Source.Slot, "public.items", "t1", &v, "")
	if err != nil {
		t.Fatal(err)
	}
	done := waitResync(t, q, req.ID)
	if done.Rows != 100 || done.Chunks != 2 || done.Estimated != 100 {
		t.Errorf("resync of t1: %+v", done)
	}
	rows, _, _ := e.changes()
	for _, r := range rows {
		if r.vals["tenant_id"] != "t1" {
			t.Fatalf("a per-destination resync of t1 published %v", r)
		}
	}
	want := map[string]string{}
	for k, v := range sourceItems(t, e.dsn) {
		if len(k) > 16 && k[:16] == "public.items|t1|" {
			want[k] = v
		}
	}
	if err := diff(want, e.folded("t1")); err != nil {
		t.Fatal(err)
	}
}

// TestResyncChunkSeesEarlierCommits: a commit whose record precedes a
// chunk's low watermark but that the chunk's snapshot does not see yet (its
// backend waits for a synchronous standby that does not exist, after its
// WAL is flushed and decoded) must not be overwritten by the chunk's older
// copy of the row: the chunk is copied again until its snapshot sees the
// commit. The negative control (no high-watermark checks) publishes the
// stale copy above the update.
func TestResyncChunkSeesEarlierCommits(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		t.Run(fmt.Sprintf("unsafe=%v", unsafe), func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, "public.items")
			e.exec(schemaSQL + `INSERT INTO items SELECT 't' || (g % 3), g, 'v' || g FROM generate_series(1, 30) g;`)
			syncRep(t, e.dsn, `ALTER SYSTEM SET synchronous_commit = 'local'; ALTER SYSTEM SET synchronous_standby_names = 'sluice_no_such_standby'`)
			t.Cleanup(func() {
				syncRep(t, e.dsn, `ALTER SYSTEM RESET synchronous_commit; ALTER SYSTEM RESET synchronous_standby_names`)
			})
			eventually(t, 10*time.Second, func() error {
				return showIs(ctx, e.dsn, "synchronous_standby_names", "sluice_no_such_standby")
			})
			run := e.start(e.newReader("a", func(r *Reader) {
				r.resyncPoll = 20 * time.Millisecond
				r.resync.NoHighWatermarkCheckForTest = unsafe
			}))
			waitStreaming(t, run)

			mover, err := pgx.Connect(ctx, e.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer mover.Close(ctx)
			if _, err := mover.Exec(ctx, `SET synchronous_commit = 'on'`); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := mover.Exec(ctx, `UPDATE items SET v = 'held' WHERE tenant_id = 't1' AND id = 1`)
				done <- err
			}()
			// The update is decoded and published while its commit is not
			// visible to other sessions.
			eventually(t, 20*time.Second, func() error {
				rows, _, _ := e.changes()
				for _, r := range rows {
					if r.vals["v"] == "held" {
						return nil
					}
				}
				return fmt.Errorf("the held update is not published yet")
			})
			q := state.NewResyncs(run.pool, e.cfg.State.Schema)
			req, err := q.Enqueue(ctx, e.cfg.Source.Slot, "public.items", "", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			retries := run.r.metrics.ResyncRetries.WithLabelValues("public.items", "unsafe")
			if unsafe {
				waitResync(t, q, req.ID)
			} else {
				eventually(t, 20*time.Second, func() error {
					if testutil.ToFloat64(retries) < 2 {
						return fmt.Errorf("%v chunks copied again", testutil.ToFloat64(retries))
					}
					return nil
				})
				if r, _ := q.Get(ctx, req.ID); r.Chunks != 0 {
					t.Fatalf("a chunk was published while its snapshot missed the held commit: %+v", r)
				}
			}
			syncRep(t, e.dsn, `ALTER SYSTEM RESET synchronous_standby_names`)
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the update was not released")
			}
			waitResync(t, q, req.ID)
			want := sourceItems(t, e.dsn)
			var got error
			eventually(t, 20*time.Second, func() error {
				got = diff(want, e.folded(""))
				if unsafe && got != nil {
					return nil
				}
				return got
			})
			if unsafe {
				if got == nil {
					t.Fatal("negative control: without the check the chunk's copy did not overwrite the held update")
				}
				t.Logf("negative control, as expected: %v", got)
			}
		})
	}
}

// TestResyncClearsRowsGone: rows the stream carried and that were deleted
// at the source without the stream saying so (the table was out of the
// publication meanwhile) leave the copy: the resync ends with a clear of
// the table at its first low watermark, below every re-copied row. The
// negative control (no clear) keeps them.
func TestResyncClearsRowsGone(t *testing.T) {
	for _, noClear := range []bool{false, true} {
		t.Run(fmt.Sprintf("noClear=%v", noClear), func(t *testing.T) {
			e := newEnv(t, "public.items")
			e.cfg.Source.ResyncChunkRows = 40
			e.exec(schemaSQL)
			run := e.start(e.newReader("a", func(r *Reader) {
				r.resyncPoll = 20 * time.Millisecond
				r.resync.NoClearForTest = noClear
			}))
			waitStreaming(t, run)
			e.exec(`INSERT INTO items SELECT 't' || (g % 3), g, 'v' || g FROM generate_series(1, 200) g`)
			waitRows(t, e, 200)
			e.exec(`ALTER PUBLICATION ` + e.cfg.Source.Publication + ` DROP TABLE items`)
			e.exec(`DELETE FROM items WHERE id % 9 = 0`)
			e.exec(`ALTER PUBLICATION ` + e.cfg.Source.Publication + ` ADD TABLE items`)
			q := state.NewResyncs(run.pool, e.cfg.State.Schema)
			req, err := q.Enqueue(context.Background(), e.cfg.Source.Slot, "public.items", "", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			waitResync(t, q, req.ID)
			want := sourceItems(t, e.dsn)
			var got error
			eventually(t, 20*time.Second, func() error {
				got = diff(want, e.folded(""))
				if noClear && got != nil {
					return nil
				}
				return got
			})
			if noClear {
				if got == nil {
					t.Fatal("negative control: without the clear the rows deleted at the source are gone anyway")
				}
				t.Logf("negative control, as expected: %v", got)
			}
		})
	}
}

// BenchmarkResync: a live resync of a 100,000-row table (50 tenants) in
// chunks of source.resync_chunk_rows (4096, the default), with the reader
// streaming; rows/s is copied rows over the resync's wall time, from the
// request's start to its end mark.
func BenchmarkResync(b *testing.B) {
	const rows = 100000
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newEnv(b, "public.items")
		e.alloc = memory.DefaultAllocator
		e.cfg.Source.Slot = fmt.Sprintf("sluice_bench_resync_%d", i) // slots are per cluster
		e.exec(schemaSQL + fmt.Sprintf(`INSERT INTO items SELECT 't' || (g %% 50), g, 'v' || g FROM generate_series(1, %d) g; ANALYZE items;`, rows))
		run := e.start(e.newReader("a", func(r *Reader) { r.resyncPoll = 10 * time.Millisecond }))
		eventually(b, 20*time.Second, func() error {
			if st := run.r.Status().State; st != "streaming" {
				return fmt.Errorf("state %s", st)
			}
			return nil
		})
		q := state.NewResyncs(run.pool, e.cfg.State.Schema)
		b.StartTimer()
		req, err := q.Enqueue(context.Background(), e.cfg.Source.Slot, "public.items", "", nil, "")
		if err != nil {
			b.Fatal(err)
		}
		var r state.Resync
		eventually(b, 5*time.Minute, func() error {
			var err error
			if r, err = q.Get(context.Background(), req.ID); err != nil || r.State != state.ResyncDone {
				return fmt.Errorf("%v %s", err, r.State)
			}
			return nil
		})
		b.StopTimer()
		el := r.FinishedAt.Sub(*r.StartedAt).Seconds()
		b.ReportMetric(float64(r.Rows)/el, "rows/s")
		b.ReportMetric(float64(r.Chunks), "chunks")
		run.stop(b)
		e.exec(`SELECT pg_drop_replication_slot('` + e.cfg.Source.Slot + `')`)
		b.StartTimer()
	}
}

// TestResyncKeepsUnchangedToast: a row is updated inside its chunk's window
// without touching its TOASTed column, so pgoutput sends that column as
// unchanged; the chunk's copy of the row is dropped (the stream's update
// wins) and the resync's clear removes the older rows that held the value.
// Folded as the catalog reads it (an unchanged column takes the value of the
// newest older row left), every row keeps its TOASTed value: the reader
// read it from the source. The negative control (NoWindowFillForTest) loses
// it, as a black-box run did before.
func TestResyncKeepsUnchangedToast(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		t.Run(fmt.Sprintf("unsafe=%v", unsafe), func(t *testing.T) {
			e := newEnv(t, "public.items")
			e.cfg.Source.ResyncChunkRows = 20
			e.exec(schemaSQL + `ALTER TABLE items ALTER COLUMN v SET STORAGE EXTERNAL;`)
			touched := 0
			run := e.start(e.newReader("a", func(r *Reader) {
				r.resyncPoll = 20 * time.Millisecond
				r.resync.NoWindowFillForTest = unsafe
				r.beforeHighWatermark = func(table string, rows [][][]byte) {
					if len(rows) == 0 || touched >= 3 {
						return
					}
					touched++
					e.exec(fmt.Sprintf(`UPDATE items SET n = %d WHERE tenant_id = '%s' AND id = %s`, touched, rows[0][0], rows[0][1]))
				}
			}))
			eventually(t, 20*time.Second, func() error {
				if st := run.r.Status().State; st != "streaming" {
					return fmt.Errorf("state %s", st)
				}
				return nil
			})
			// Streamed, not backfilled: every row's full image is in the
			// stream below the resync's first LW.
			e.exec(`INSERT INTO items SELECT 't' || (g % 3), g, repeat(md5(g::text), 200), 0 FROM generate_series(1, 100) g`)
			q := state.NewResyncs(run.pool, e.cfg.State.Schema)
			req, err := q.Enqueue(context.Background(), e.cfg.Source.Slot, "public.items", "", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			if done := waitResync(t, q, req.ID); done.Dropped != 3 {
				t.Fatalf("%d rows dropped from chunks, want 3", done.Dropped)
			}
			want := sourceItems(t, e.dsn)
			var got error
			eventually(t, 20*time.Second, func() error {
				got = diff(want, e.foldedToast())
				if unsafe && got != nil {
					return nil
				}
				return got
			})
			if unsafe {
				if got == nil {
					t.Fatal("negative control: without reading the unchanged values the rows still hold them")
				}
				t.Logf("negative control, as expected: %.300v", got)
			}
		})
	}
}

// foldedToast is folded with TOAST-unchanged columns filled the way the
// catalog fills them: from the newest older row of the key that a clear has
// not removed ("<lost>" when there is none), as tenant|id -> v.
func (e *env) foldedToast() map[string]string {
	rows, _, _ := e.changes()
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].pos.Less(rows[j].pos) })
	state := map[string]map[string]any{}
	for _, r := range rows {
		switch {
		case proto.IsClear(r.op):
			clear(state)
		case proto.IsTombstone(r.op):
			delete(state, keyOf(r, "tenant_id", "id"))
		default:
			k := keyOf(r, "tenant_id", "id")
			vals := maps.Clone(r.vals)
			for _, c := range r.unchanged {
				vals[c] = "<lost>"
				if old, ok := state[k]; ok {
					vals[c] = old[c]
				}
			}
			state[k] = vals
		}
	}
	out := map[string]string{}
	for k, vals := range state {
		v := "<nil>"
		if s, ok := vals["v"].(string); ok {
			v = s
		}
		out[k] = v
	}
	return out
}
