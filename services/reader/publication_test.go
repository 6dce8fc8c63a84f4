package reader

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/state"
)

const itemsSQL = `CREATE TABLE items (tenant_id text, id int, v text, PRIMARY KEY (tenant_id, id));
	CREATE TABLE other (tenant_id text, id int, PRIMARY KEY (tenant_id, id));`

func serverVersion(t *testing.T, dsn string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v int
	if err := conn.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// waitOther inserts a row of public.other and waits for it in the stream:
// every change committed before it has been decoded.
func waitOther(t *testing.T, e *env, id int) {
	t.Helper()
	e.exec(fmt.Sprintf(`INSERT INTO other VALUES ('t1', %d)`, id))
	eventually(t, 20*time.Second, func() error {
		rows, _, _ := e.changes()
		for _, r := range rows {
			if r.table == "public.other" && r.vals["id"] == int64(id) {
				return nil
			}
		}
		return fmt.Errorf("other %d not in the stream", id)
	})
}

// TestPublicationAlteredWhileRunning: the user's publication (no marker)
// altered while the reader runs to leave a captured table out: the periodic
// check halts the table (persisted, shown with what to run, at a position
// before the ALTER), the stream stops carrying it while the other table
// flows, a resync is refused until the publication is fixed, and after the
// fix a resync makes the stream equal the source again (the update the
// publication filtered included). The control without the check: the
// update is silently missing.
func TestPublicationAlteredWhileRunning(t *testing.T) {
	for _, control := range []bool{false, true} {
		t.Run(map[bool]string{false: "checked", true: "control"}[control], func(t *testing.T) {
			e := newEnv(t, "public.items", "public.other")
			e.exec(itemsSQL + `CREATE PUBLICATION sluice_test FOR TABLE items, other;
				INSERT INTO items VALUES ('t1', 1, 'a'), ('t1', 2, 'b');`)
			e.cfg.Source.Backfill = true
			run := e.start(e.newReader("a", func(r *Reader) {
				r.schemaEvery = 100 * time.Millisecond
				r.rules.noPublicationCheck = control
			}))
			waitStreaming(t, run)
			waitRows(t, e, 2)
			e.exec(`ALTER PUBLICATION sluice_test DROP TABLE items`)
			altered := (&pgSource{t, e.dsn}).lsn() // at or after the ALTER's commit
			e.exec(`UPDATE items SET v = 'changed' WHERE id = 1`)
			if control {
				waitOther(t, e, 1)
				time.Sleep(time.Second) // ten periodic checks
				if got := e.folded("")["public.items|t1|1"]; got != "a" {
					t.Fatalf("control: the filtered update arrived (%q): the test shows nothing", got)
				}
				if h := run.r.Status().Halted; len(h) > 0 {
					t.Fatalf("control: halted %v", h)
				}
				return
			}
			waitHalted(t, run, "public.items", "publication sluice_test captures a subset of it")
			st := run.r.Status()
			reason := st.Halted["public.items"]
			for _, w := range []string{"not in the publication", `ALTER PUBLICATION "sluice_test" ADD TABLE "public"."items"`, "sluice resync --table public.items"} {
				if !strings.Contains(reason, w) {
					t.Errorf("halt reason does not say %q: %s", w, reason)
				}
			}
			if at := st.HaltedAt["public.items"]; at == "" || lsnAfter(t, at, altered) {
				t.Errorf("halted at %q, want a position at or before %s (the ALTER's commit): its first change not carried is after it", at, altered)
			}
			halts, _, err := loadHalts(context.Background(), run.pool, e.cfg.State.Schema, e.cfg.Source.Slot)
			if err != nil || halts["public.items"] != reason {
				t.Fatalf("persisted halts %v, %v", halts, err)
			}
			// The session restarted without the table: an insert is not
			// carried, the other table's row is.
			time.Sleep(500 * time.Millisecond)
			e.exec(`INSERT INTO items VALUES ('t1', 3, 'c')`)
			waitOther(t, e, 2)
			if _, ok := e.folded("")["public.items|t1|3"]; ok {
				t.Fatal("the halted table's insert was carried")
			}

			q := state.NewResyncs(run.pool, e.cfg.State.Schema)
			req, err := q.Enqueue(context.Background(), e.cfg.Source.Slot, "public.items", "", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, func() error {
				r, err := q.Get(context.Background(), req.ID)
				if err != nil {
					return err
				}
				if r.State != state.ResyncFailed {
					return fmt.Errorf("resync %s", r.State)
				}
				if !strings.Contains(r.Error, "publication sluice_test captures less than sluice needs") {
					t.Fatalf("resync failed for another reason: %s", r.Error)
				}
				return nil
			})
			e.exec(`ALTER PUBLICATION sluice_test ADD TABLE items`)
			req, err = q.Enqueue(context.Background(), e.cfg.Source.Slot, "public.items", "", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			waitResync(t, q, req.ID)
			eventually(t, 20*time.Second, func() error {
				return diff(sourceItems(t, e.dsn), foldedItems(e))
			})
			if h := run.r.Status().Halted; len(h) > 0 {
				t.Fatalf("still halted after the resync: %v", h)
			}
		})
	}
}

// foldedItems is the stream's public.items (e.folded without other).
func foldedItems(e *env) map[string]string {
	out := e.folded("")
	for k := range out {
		if !strings.HasPrefix(k, "public.items|") {
			delete(out, k)
		}
	}
	return out
}

type pgSource struct {
	t   *testing.T
	dsn string
}

func (p *pgSource) lsn() string {
	p.t.Helper()
	conn, err := pgx.Connect(context.Background(), p.dsn)
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var l string
	if err := conn.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&l); err != nil {
		p.t.Fatal(err)
	}
	return l
}

func lsnAfter(t *testing.T, a, b string) bool {
	t.Helper()
	var ah, al, bh, bl uint64
	if _, err := fmt.Sscanf(a, "%X/%X", &ah, &al); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(b, "%X/%X", &bh, &bl); err != nil {
		t.Fatal(err)
	}
	return ah<<32|al > bh<<32|bl
}

// TestPublicationRefusedAtStart: a reader that starts on a user's
// publication with a problem exits with the error, and, when its slot
// already streamed, leaves the table halted at the slot's position: the WAL
// written meanwhile is decoded under the publication as it was, so after
// the fix only a resync brings back what it filtered.
func TestPublicationRefusedAtStart(t *testing.T) {
	e := newEnv(t, "public.items", "public.other")
	e.exec(itemsSQL + `CREATE PUBLICATION sluice_test FOR TABLE items, other;`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	run.stop(t)
	e.exec(`ALTER PUBLICATION sluice_test SET (publish = 'insert')`)
	r := e.newReader("b", nil)
	pool := e.statePool()
	defer pool.Close()
	r.deps.State = pool
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := r.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "publication sluice_test captures less than sluice needs") ||
		!strings.Contains(err.Error(), "table public.items") {
		t.Fatalf("Run = %v", err)
	}
	halts, at, err := loadHalts(ctx, pool, e.cfg.State.Schema, e.cfg.Source.Slot)
	if err != nil || !strings.Contains(halts["public.items"], "does not publish delete, truncate, update") || at["public.items"] == 0 {
		t.Fatalf("halts %v at %v, %v", halts, at, err)
	}
}

// TestPublicationRepairedWhileRunning: the publication sluice created,
// given a row filter (Postgres 15+; a publish subset on 14) while the
// reader runs, is repaired by the periodic check, and the table is
// resynced (reason publication): the change the publication kept out
// arrives. The control without the check: it never does.
func TestPublicationRepairedWhileRunning(t *testing.T) {
	for _, control := range []bool{false, true} {
		t.Run(map[bool]string{false: "checked", true: "control"}[control], func(t *testing.T) {
			e := newEnv(t, "public.items", "public.other")
			e.exec(itemsSQL + `INSERT INTO items VALUES ('t1', 1, 'a');`)
			e.cfg.Source.Backfill = true
			run := e.start(e.newReader("a", func(r *Reader) {
				r.schemaEvery = 100 * time.Millisecond
				r.rules.noPublicationCheck = control
			}))
			waitStreaming(t, run)
			waitRows(t, e, 1)
			alter := `ALTER PUBLICATION sluice_test SET (publish = 'insert'); UPDATE items SET v = 'changed' WHERE id = 1;`
			if serverVersion(t, e.dsn) >= 150000 {
				alter = `BEGIN; ALTER PUBLICATION sluice_test DROP TABLE items; ALTER PUBLICATION sluice_test ADD TABLE items WHERE (id < 100); COMMIT;
					INSERT INTO items VALUES ('t1', 200, 'filtered');`
			}
			e.exec(alter)
			if control {
				waitOther(t, e, 1)
				time.Sleep(time.Second) // ten periodic checks
				if err := diff(sourceItems(t, e.dsn), foldedItems(e)); err == nil {
					t.Fatal("control: the stream equals the source: the test shows nothing")
				}
				return
			}
			q := state.NewResyncs(run.pool, e.cfg.State.Schema)
			var id int64
			eventually(t, 20*time.Second, func() error {
				list, err := q.List(context.Background(), e.cfg.Source.Slot, 10)
				if err != nil {
					return err
				}
				for _, r := range list {
					if r.Table == "public.items" && r.Reason == ReasonPublication {
						id = r.ID
						return nil
					}
				}
				return fmt.Errorf("no resync for the publication in %v", list)
			})
			// sluice wait waits for it (the rows are in no snapshot until it is done).
			if h := run.r.Status().ResyncHolds["public.items"]; h.ResyncID != id || h.Reason != ReasonPublication {
				t.Errorf("resync hold %+v, want resync %d for the publication", h, id)
			}
			waitResync(t, q, id)
			c, err := source.CheckPublication(context.Background(), run.pool, e.cfg.Source.Publication, e.cfg.Source.Tables)
			if err != nil || !c.Owned || len(c.Problems) > 0 {
				t.Fatalf("after the repair: %+v, %v", c, err)
			}
			eventually(t, 20*time.Second, func() error { return diff(sourceItems(t, e.dsn), foldedItems(e)) })
			if h := run.r.Status().Halted; len(h) > 0 {
				t.Fatalf("halted: %v", h)
			}
		})
	}
}
