package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/state"
	"github.com/sluice-cdc/sluice/test/kit"
)

// awaitAutoResync waits until n resyncs whose reason starts with prefix are
// done and returns the last; a failed one fails the test.
func (s *sluice) awaitAutoResync(prefix string, n int, timeout time.Duration) state.Resync {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var done []state.Resync
		for _, r := range s.resyncs() {
			if !strings.HasPrefix(r.Reason, prefix) {
				continue
			}
			if r.State == state.ResyncFailed {
				s.t.Fatalf("auto resync %d failed: %s\n%s", r.ID, r.Error, s.tail())
			}
			if r.State == state.ResyncDone {
				done = append(done, r)
			}
		}
		if len(done) >= n {
			return done[len(done)-1]
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no %d done resyncs with reason %s after %s: %+v\n%s", n, prefix, timeout, s.resyncs(), s.tail())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestAutoResyncOnSchemaChange (issue 14 item 5): `ADD COLUMN x int
// DEFAULT 7` and `RENAME COLUMN` rewrite the existing rows without a row in
// the WAL; the reader sees them in the next Relation message, resyncs the
// table by itself, and every tenant's copy ends equal to the source (older
// rows read the default, the new name) without operator action. Steps
// 3, 4 and 6 change no row after the DDL: the periodic schema check (every
// 10 s) sees them, with no Relation message to tell. The last column dropped
// and added again under its name is seen by its attnum, in a Relation
// message and by the periodic check.
func TestAutoResyncOnSchemaChange(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.sc_items (tenant_id text NOT NULL, id bigint NOT NULL, v int NOT NULL, name text, PRIMARY KEY (tenant_id, id));
		INSERT INTO public.sc_items SELECT 't' || (g % 8), g, g, 'n' || g FROM generate_series(1, 800) g;`)
	s, ctx := startLive(t, src, []string{"public.sc_items"}, "SLUICE_SOURCE_RESYNC_CHUNK_ROWS=200")
	check := func(step string) {
		t.Helper()
		if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
			t.Fatalf("%s: sluice wait: %v\n%s", step, err, s.tail())
		}
		if rows, diffs := oracle(t, src, s, "public.sc_items", []string{"tenant_id", "id"}); len(diffs) > 0 {
			t.Fatalf("%s: %d rows checked, %d differences:\n%s", step, rows, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
		}
	}
	seen := map[string]int{}
	for i, step := range []struct{ ddl, change, reason string }{
		{`ALTER TABLE public.sc_items ADD COLUMN x int DEFAULT 7`, `INSERT INTO public.sc_items VALUES ('t1', 100001, 1, 'new', 8)`, "schema_change: column_default"},
		{`ALTER TABLE public.sc_items RENAME COLUMN name TO title`, `UPDATE public.sc_items SET v = -v WHERE id = 5`, "schema_change: column_renamed"},
		{`ALTER TABLE public.sc_items ADD COLUMN y text DEFAULT 'd'`, "", "schema_change: column_default"},
		{`ALTER TABLE public.sc_items RENAME COLUMN title TO label`, "", "schema_change: column_renamed"},
		// The last column dropped and added again comes back in its place,
		// under its name and type: only its attnum tells.
		{`ALTER TABLE public.sc_items DROP COLUMN y; ALTER TABLE public.sc_items ADD COLUMN y text DEFAULT 'e'`, `UPDATE public.sc_items SET v = -v WHERE id = 6`, "schema_change: column_readded"},
		{`ALTER TABLE public.sc_items DROP COLUMN y; ALTER TABLE public.sc_items ADD COLUMN y text DEFAULT 'f'`, "", "schema_change: column_readded"},
	} {
		src.exec(step.ddl)
		if step.change != "" {
			src.exec(step.change) // the Relation message comes with the table's next change
		}
		seen[step.reason]++
		r := s.awaitAutoResync(step.reason, seen[step.reason], 3*time.Minute)
		if _, err := kit.Wait(ctx, s.server, r.EndLSN, 3*time.Minute); err != nil {
			t.Fatalf("%s: waiting for the resync's end %s: %v\n%s", step.ddl, r.EndLSN, err, s.tail())
		}
		check(fmt.Sprintf("step %d (%s)", i+1, step.ddl))
	}
	m, err := s.cli("status")
	if err != nil || strings.Contains(m, "halted table public.sc_items") {
		t.Errorf("status after the schema changes: %v\n%s", err, m)
	}
}

// TestSlotDroppedMidStream (issue 14 item 6): the replication slot is
// dropped while the reader streams (its walsender terminated first), and
// rows are deleted and changed while it is gone (their WAL is never
// decoded). The reader creates the slot again, copies every table at its
// snapshot and clears what the copy did not bring again; the table ends
// equal to the source, and `sluice wait` on the source's LSN returns only
// once that copy is published.
func TestSlotDroppedMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.sl_items (tenant_id text NOT NULL, id bigint NOT NULL, v int NOT NULL, PRIMARY KEY (tenant_id, id));
		INSERT INTO public.sl_items SELECT 't' || (g % 8), g, g FROM generate_series(1, 1000) g;`)
	s, ctx := startLive(t, src, []string{"public.sl_items"})
	src.exec(`UPDATE public.sl_items SET v = v + 1 WHERE id % 7 = 0`)
	slots := src.strings(`SELECT slot_name::text FROM pg_replication_slots WHERE NOT temporary`)
	if len(slots) != 1 {
		t.Fatalf("slots %v", slots)
	}
	slot := slots[0]
	// Drop it: terminate its walsender, then drop it before the reader
	// reconnects (retried when it did), and in the same round trip change
	// rows: those changes the stream never carries, the new slot's copy must.
	dropped := false
	for range 100 {
		src.strings(`SELECT pg_terminate_backend(active_pid)::text FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		if err := src.tryExec(fmt.Sprintf(`SELECT pg_drop_replication_slot('%s');
			DELETE FROM public.sl_items WHERE id %% 13 = 0;
			UPDATE public.sl_items SET v = -v WHERE id %% 11 = 0;
			INSERT INTO public.sl_items SELECT 't' || (g %% 8), g, g FROM generate_series(2001, 2100) g;`, slot)); err == nil {
			dropped = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !dropped {
		t.Fatal("could not drop the slot: the reader keeps it active")
	}
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 5*time.Minute); err != nil {
		t.Fatalf("sluice wait after the slot was dropped: %v\n%s", err, s.tail())
	}
	if len(s.dev.P.Grep("replication slot lost")) == 0 {
		t.Errorf("the reader did not say the slot was lost\n%s", s.tail())
	}
	var tenants []string
	for i := range 8 {
		tenants = append(tenants, fmt.Sprintf("t%d", i))
	}
	rep, err := kit.Check(ctx, src.dsn, s.server, kit.CheckOptions{Tenants: tenants, Tables: []kit.Table{{Name: "public.sl_items", Keys: []string{"tenant_id", "id"}, Routing: "tenant_id"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if !rep.OK() {
		t.Fatalf("after the slot was recreated, %d differences:\n%s", len(rep.Diffs), strings.Join(rep.Diffs, "\n"))
	}
}

// TestWaitHoldsForSchemaResync: a schema change that rewrites existing rows
// without WAL is carried by the reader's own resync, which runs while the
// stream goes on; `sluice wait` on an LSN taken right after the DDL (and a
// change that brings its Relation message) returns only once that resync is
// published, so the oracle finds every row's new value at once; and so does
// a DDL with no change after it, which only the periodic schema check sees.
// The build before returned while the resync still ran (rows missing the
// default).
func TestWaitHoldsForSchemaResync(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.wh_items (tenant_id text NOT NULL, id bigint NOT NULL, v int NOT NULL, PRIMARY KEY (tenant_id, id));
		INSERT INTO public.wh_items SELECT 't' || (g % 8), g, g FROM generate_series(1, 20000) g;`)
	s, ctx := startLive(t, src, []string{"public.wh_items"}, "SLUICE_SOURCE_RESYNC_CHUNK_ROWS=500")
	src.exec(`ALTER TABLE public.wh_items ADD COLUMN d int DEFAULT 7;
		INSERT INTO public.wh_items VALUES ('t1', 100001, 1, 8)`)
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("sluice wait: %v\n%s", err, s.tail())
	}
	rows, diffs := oracle(t, src, s, "public.wh_items", []string{"tenant_id", "id"})
	if len(diffs) > 0 {
		t.Fatalf("right after sluice wait: %d rows checked, %d differences:\n%s", rows, len(diffs), strings.Join(diffs[:min(len(diffs), 10)], "\n"))
	}
	if r := s.awaitAutoResync("schema_change: column_default", 1, time.Minute); r.Rows < 20000 {
		t.Fatalf("the resync copied %d rows", r.Rows)
	}
	// No row change after the DDL: no Relation message comes, and only the
	// reader's periodic schema check sees it.
	src.exec(`ALTER TABLE public.wh_items ADD COLUMN e int DEFAULT 3`)
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("sluice wait: %v\n%s", err, s.tail())
	}
	rows, diffs = oracle(t, src, s, "public.wh_items", []string{"tenant_id", "id"})
	if len(diffs) > 0 {
		t.Fatalf("right after sluice wait, no change after the DDL: %d rows checked, %d differences:\n%s", rows, len(diffs), strings.Join(diffs[:min(len(diffs), 10)], "\n"))
	}
}

// TestPartitionAttachDetach: ATTACH PARTITION brings a table's rows into a
// captured partitioned table and DETACH PARTITION takes a partition's rows
// out, with no row in the WAL. The reader's periodic schema check sees the
// leaf partitions change and resyncs the table by itself; `sluice wait`
// right after each DDL returns once that resync is published, and every
// tenant's copy equals the source. The build before never copied the
// attached rows nor removed the detached ones.
func TestPartitionAttachDetach(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.pa_items (tenant_id text NOT NULL, id bigint NOT NULL, region int NOT NULL, v text, PRIMARY KEY (tenant_id, id, region)) PARTITION BY LIST (region);
		CREATE TABLE public.pa_r1 PARTITION OF public.pa_items FOR VALUES IN (1);
		CREATE TABLE public.pa_r2 PARTITION OF public.pa_items FOR VALUES IN (2);
		INSERT INTO public.pa_items SELECT 't' || (g % 8), g, 1 + g % 2, 'v' FROM generate_series(1, 2000) g;
		CREATE TABLE public.pa_r3 (LIKE public.pa_items INCLUDING ALL);
		INSERT INTO public.pa_r3 SELECT 't' || (g % 8), g, 3, 'attached' FROM generate_series(1, 500) g;`)
	s, ctx := startLive(t, src, []string{"public.pa_items"})
	for _, ddl := range []string{
		`ALTER TABLE public.pa_items ATTACH PARTITION public.pa_r3 FOR VALUES IN (3)`,
		`ALTER TABLE public.pa_items DETACH PARTITION public.pa_r2`,
	} {
		src.exec(ddl)
		if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
			t.Fatalf("%s: sluice wait: %v\n%s", ddl, err, s.tail())
		}
		if rows, diffs := oracle(t, src, s, "public.pa_items", []string{"tenant_id", "id", "region"}); len(diffs) > 0 {
			t.Fatalf("%s: %d rows checked, %d differences:\n%s", ddl, rows, len(diffs), strings.Join(diffs[:min(len(diffs), 10)], "\n"))
		}
	}
	s.awaitAutoResync("schema_change: partitions", 2, time.Minute)
}
