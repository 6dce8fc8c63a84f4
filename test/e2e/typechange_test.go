package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/state"
	"github.com/sluice-cdc/sluice/test/kit"
)

// typeChangeTable is the type-change tests' table: 3,000 rows over five
// tenants, v an integer.
const typeChangeTable = `CREATE TABLE public.tc_items (tenant_id text NOT NULL, id bigint NOT NULL, v int NOT NULL, PRIMARY KEY (tenant_id, id));
	INSERT INTO public.tc_items SELECT 't' || (g % 5), g, g FROM generate_series(1, 3000) g; ANALYZE public.tc_items;`

// awaitHalt waits until `sluice status` shows table halted, with the
// command that recovers it.
func (s *sluice) awaitHalt(table string, timeout time.Duration) string {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, _ := s.cli("status")
		if strings.Contains(out, "halted table "+table) {
			if !strings.Contains(out, "sluice resync --table "+table) {
				s.t.Errorf("status shows the halt without the command to run:\n%s", out)
			}
			return out
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s did not halt:\n%s\n%s", table, out, s.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// resyncRecovers runs `sluice resync --table T --wait` of a halted table
// (keyed by tenant_id, id), checks it is no longer halted, runs after (it
// streams again) and compares every tenant's copy with the source.
func resyncRecovers(ctx context.Context, t *testing.T, src *pg, s *sluice, table string, after ...string) {
	t.Helper()
	out, err := s.cli("resync", "--table", table, "--wait", "--timeout", "5m")
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, s.tail())
	}
	if st, _ := s.cli("status"); strings.Contains(st, "halted table "+table) {
		t.Fatalf("still halted after the resync:\n%s", st)
	}
	for _, q := range after {
		src.exec(q)
	}
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("sluice wait after the resync: %v\n%s", err, s.tail())
	}
	if rows, diffs := oracle(t, src, s, table, []string{"tenant_id", "id"}); len(diffs) > 0 {
		t.Fatalf("after the resync, %d rows checked, %d differences:\n%s", rows, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
}

// afterTypeChange are the changes made once the type-change tests' table
// streams again.
var afterTypeChange = []string{
	`UPDATE public.tc_items SET v = v || '!' WHERE id = 1`,
	`DELETE FROM public.tc_items WHERE id = 2`,
	`INSERT INTO public.tc_items VALUES ('t3', 100002, '77')`,
}

// liveTypeChangeTable starts `sluice dev` over a new tc_items table (resync
// chunks of chunkRows) and waits until it is live.
func liveTypeChangeTable(t *testing.T, chunkRows int) (*pg, *sluice, context.Context) {
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(typeChangeTable)
	s, ctx := startLive(t, src, []string{"public.tc_items"}, fmt.Sprintf("SLUICE_SOURCE_RESYNC_CHUNK_ROWS=%d", chunkRows))
	return src, s, ctx
}

// TestTypeChangeHaltsThenResyncRecovers: `ALTER COLUMN v TYPE text USING
// 'v' || v` rewrites every row without WAL and changes the column's kind.
// The table's next change, the first of the session, halts it (the kinds
// the stream carried are remembered, not only the session's last Relation
// message); changes while it is halted are not carried; one `sluice
// resync` later the table streams again, under its new kind (the catalog's
// next table generation), and every tenant's copy equals the source. Its
// negative control is TestNegativeNoKnownKinds.
func TestTypeChangeHaltsThenResyncRecovers(t *testing.T) {
	src, s, ctx := liveTypeChangeTable(t, 500)
	src.exec(`ALTER TABLE public.tc_items ALTER COLUMN v TYPE text USING 'v' || v`)
	src.exec(`UPDATE public.tc_items SET v = 'u' || id WHERE id % 11 = 0`)
	s.awaitHalt("public.tc_items", time.Minute)
	src.exec(`DELETE FROM public.tc_items WHERE id % 13 = 0`)
	resyncRecovers(ctx, t, src, s, "public.tc_items", afterTypeChange...)
}

// TestTypeChangeWhileDownHalts: the type changes while sluice is down
// (killed with SIGKILL); the restarted reader compares the table's first
// Relation message with the kinds it saved, halts the table, and one
// `sluice resync` recovers it. Killed and started again after that, the
// reader still lists the recovered halt with the resync's end (what
// `sluice wait` waits for).
func TestTypeChangeWhileDownHalts(t *testing.T) {
	src, s, ctx := liveTypeChangeTable(t, 500)
	src.exec(`UPDATE public.tc_items SET v = -v WHERE id % 7 = 0`) // the stream describes the table before the kill
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	s.dev.P.Kill()
	src.exec(`ALTER TABLE public.tc_items ALTER COLUMN v TYPE text USING 'w' || v`)
	src.exec(`UPDATE public.tc_items SET v = 'u' || id WHERE id % 11 = 0`)
	s.start()
	s.awaitHalt("public.tc_items", 2*time.Minute)
	resyncRecovers(ctx, t, src, s, "public.tc_items", afterTypeChange...)
	s.dev.P.Kill()
	s.start()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := kit.Status(ctx, s.dev.P)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(st)
		if strings.Contains(string(b), `"recovered_halts":{"public.tc_items":{"end_lsn":"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a restart the reader does not list the recovered halt of public.tc_items:\n%s", b)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestTypeChangeResyncKilled: the resync that recovers a type change is
// killed with SIGKILL midway (some chunks already in the new generation);
// the restarted reader finds the table still halted and the resync
// running, starts it over from its first chunk, and the table ends equal
// and not halted.
func TestTypeChangeResyncKilled(t *testing.T) {
	src, s, ctx := liveTypeChangeTable(t, 100)
	src.exec(`ALTER TABLE public.tc_items ALTER COLUMN v TYPE bigint USING v * 1000`)
	src.exec(`UPDATE public.tc_items SET v = -v WHERE id % 11 = 0`)
	s.awaitHalt("public.tc_items", time.Minute)
	id := s.startResync("--table", "public.tc_items")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		r := s.resync(id)
		if r.State == state.ResyncDone {
			t.Fatalf("the resync finished before the kill (chunks %d): make the chunks smaller", r.Chunks)
		}
		if r.Chunks >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resync at %d chunks after 3 minutes\n%s", r.Chunks, s.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.dev.P.Kill()
	src.exec(`DELETE FROM public.tc_items WHERE id % 13 = 0`)
	s.start()
	deadline = time.Now().Add(5 * time.Minute)
	for {
		r := s.resync(id)
		if r.State == state.ResyncFailed {
			t.Fatalf("resync failed: %s\n%s", r.Error, s.tail())
		}
		if r.State == state.ResyncDone {
			if _, err := kit.Wait(ctx, s.server, r.EndLSN, 3*time.Minute); err != nil {
				t.Fatalf("waiting for the resync's end %s: %v\n%s", r.EndLSN, err, s.tail())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resync not done: %+v\n%s", r, s.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, _ := s.cli("status"); strings.Contains(st, "halted table public.tc_items") {
		t.Fatalf("still halted after the resync:\n%s", st)
	}
	src.exec(`UPDATE public.tc_items SET v = v + 1 WHERE id = 1`)
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("sluice wait: %v\n%s", err, s.tail())
	}
	if rows, diffs := oracle(t, src, s, "public.tc_items", []string{"tenant_id", "id"}); len(diffs) > 0 {
		t.Fatalf("after the resync, %d rows checked, %d differences:\n%s", rows, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
}

// TestTypeChangeWhileDownResyncAtOnce: as TestTypeChangeWhileDownHalts,
// but `sluice resync` runs as soon as sluice is up again, before the
// restarted stream has reached the change that halts the table: the
// resync, started for a table that was not halted, recovers the halt that
// comes before its first chunk (its end clears it), and `sluice wait`
// returns. The halt may also come first; the outcome is the same.
func TestTypeChangeWhileDownResyncAtOnce(t *testing.T) {
	src, s, ctx := liveTypeChangeTable(t, 500)
	s.dev.P.Kill()
	src.exec(`ALTER TABLE public.tc_items ALTER COLUMN v TYPE numeric USING v * 1.5`)
	src.exec(`UPDATE public.tc_items SET v = -v WHERE id % 11 = 0`)
	s.start()
	resyncRecovers(ctx, t, src, s, "public.tc_items", `UPDATE public.tc_items SET v = v + 1 WHERE id < 5`)
}
