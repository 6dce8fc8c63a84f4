package reader

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// folded is the CHANGES stream applied by position, as tenant|id -> v.
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
