package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

// TestSourceColumnsNamedLikeTheCatalogs: a source table with columns named
// like the catalog's own (store_id, pack_id, destination, version, and the
// other names a rows-table statement used: table, path, fingerprint,
// rows, bytes, publish_id, _w, _c0, _t0, _n, _op, _lsn), a table keyed by
// columns whose quoted names hold a comma and edge spaces ("a,b", " x "),
// and an ordinary table, captured together: `sluice wait` returns and
// every tenant's copy of each table equals the source, after a column
// named like the catalog's is added to the ordinary table while it
// streams (docs/adr/0044-reserved-catalog-names.md). With catalog schema 8
// the rows table's CREATE failed forever: wait never returned and every
// read answered "table not in catalog"; with the key travelling as one
// comma-joined string the keyed table's packs named columns "a", "b" and
// "x", which no batch holds.
func TestSourceColumnsNamedLikeTheCatalogs(t *testing.T) {
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.clash (tenant_id text NOT NULL, id bigint NOT NULL,
		store_id text, pack_id text, destination text, version bigint, "table" text, path text, fingerprint text,
		rows int, bytes bytea, publish_id text, _w text, _c0 text, _t0 text, _n text, _op int, _lsn bigint, tags text[],
		PRIMARY KEY (tenant_id, id));
	INSERT INTO public.clash SELECT 't' || (g % 3), g, 's' || g, 'p' || g, 'd' || g, g * 10, 'tb' || g, 'pa' || g, 'f' || g,
		g, '\x00ff'::bytea, 'pub' || g, 'w' || g, 'c' || g, 't' || g, 'n' || g, g, g * 7, ARRAY['x' || g, NULL]
		FROM generate_series(1, 300) g;
	CREATE TABLE public.keyed (tenant_id text NOT NULL, "a,b" text NOT NULL, " x " int NOT NULL, v text,
		PRIMARY KEY (tenant_id, "a,b", " x "));
	INSERT INTO public.keyed SELECT 't' || (g % 3), 'k,' || (g % 7), g, 'v' || g FROM generate_series(1, 200) g;
	CREATE TABLE public.plain (tenant_id text NOT NULL, id bigint NOT NULL, v text, PRIMARY KEY (tenant_id, id));
	INSERT INTO public.plain SELECT 't' || (g % 3), g, 'v' || g FROM generate_series(1, 300) g;`)
	s, ctx := startLive(t, src, []string{"public.clash", "public.keyed", "public.plain"})
	src.exec(`UPDATE public.clash SET destination = 'moved', version = -1, store_id = NULL WHERE id % 5 = 0;
		DELETE FROM public.clash WHERE id % 7 = 0;
		UPDATE public.keyed SET v = 'changed' WHERE " x " % 4 = 0;
		DELETE FROM public.keyed WHERE " x " % 9 = 0;
		ALTER TABLE public.plain ADD COLUMN store_id text, ADD COLUMN destination text;
		UPDATE public.plain SET store_id = 'S' || id, destination = 'D' || id WHERE id % 2 = 0;
		INSERT INTO public.plain VALUES ('t1', 1000, 'new', 'S', 'D')`)
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("sluice wait: %v\n%s", err, s.tail())
	}
	for _, tc := range []struct {
		table string
		keys  []string
	}{{"public.clash", []string{"tenant_id", "id"}}, {"public.keyed", []string{"tenant_id", "a,b", " x "}}, {"public.plain", []string{"tenant_id", "id"}}} {
		rows, diffs := oracle(t, src, s, tc.table, tc.keys)
		if len(diffs) > 0 {
			t.Errorf("%s: %d rows checked, %d differences:\n%s", tc.table, rows, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
		}
		if rows == 0 {
			t.Errorf("%s: the oracle checked no rows", tc.table)
		}
	}
}

// TestEngineRefusedTableHaltsOnlyItself: a source table with a column the
// catalog engine refuses (_row_exists, which MergeTree reserves) beside an
// ordinary table: the refused table's packs are dead-lettered and halt
// their destinations, with the engine's reason in `sluice status`;
// `sluice wait` exits 2 naming the halt; the ordinary table keeps flowing
// and equals the source, also for changes made while the other is halted.
// Then the recovery, the control that the halt is the table's alone: the
// column renamed at the source and one `sluice resync --table`, after
// which wait exits 0 and the table equals the source. Before, the refused
// CREATE was retried forever and wait never returned for any table.
func TestEngineRefusedTableHaltsOnlyItself(t *testing.T) {
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.refused (tenant_id text NOT NULL, id bigint NOT NULL, v text, _row_exists text, PRIMARY KEY (tenant_id, id));
	INSERT INTO public.refused SELECT 't' || (g % 3), g, 'v' || g, 'r' || g FROM generate_series(1, 200) g;
	CREATE TABLE public.plain (tenant_id text NOT NULL, id bigint NOT NULL, v text, PRIMARY KEY (tenant_id, id));
	INSERT INTO public.plain SELECT 't' || (g % 3), g, 'v' || g FROM generate_series(1, 200) g;`)
	s := newSluice(t, src.dsn, []string{"public.refused", "public.plain"})
	t.Cleanup(func() { artifacts(t, s.dev.Dir) })
	s.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The backfill's packs of the refused table halt it, with the engine's
	// reason, once the stream is live.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, _ := s.cli("status", "--json")
		var st struct {
			HaltedPacks []struct {
				Table        string   `json:"table"`
				Destinations []string `json:"destinations"`
				Reason       string   `json:"reason"`
			} `json:"halted_packs"`
		}
		halted := false
		if json.Unmarshal([]byte(out), &st) == nil {
			for _, h := range st.HaltedPacks {
				halted = halted || h.Table == "public.refused" && len(h.Destinations) > 0 && strings.Contains(h.Reason, "_row_exists")
			}
		}
		if halted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status does not list the refused table's halt with the engine's reason:\n%s\n%s", out, s.tail())
		}
		time.Sleep(500 * time.Millisecond)
	}
	src.exec(`UPDATE public.plain SET v = 'changed' WHERE id % 4 = 0; DELETE FROM public.plain WHERE id % 9 = 0;
		UPDATE public.refused SET v = 'changed' WHERE id % 4 = 0`)
	target := src.lsn()
	_, err := kit.Wait(ctx, s.server, target, 3*time.Minute)
	if err == nil || !strings.Contains(err.Error(), "exit status 2") || !strings.Contains(err.Error(), "public.refused") {
		t.Fatalf("sluice wait over a refused table: %v, want exit 2 naming public.refused\n%s", err, s.tail())
	}
	// Exit 2 says a halt holds a change; the snapshots still pass target
	// (the frontier is not held by the refused table).
	want, err := proto.ParseLSN(target)
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, through, err := latestSnapshot(ctx, s.server)
		if lsn, perr := proto.ParseLSN(through); err == nil && perr == nil && lsn >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot through %s beside the refused table (latest through %s, %v)\n%s", target, through, err, s.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if rows, diffs := oracle(t, src, s, "public.plain", []string{"tenant_id", "id"}); len(diffs) > 0 || rows == 0 {
		t.Fatalf("the ordinary table beside a halted one: %d rows checked, %d differences:\n%s", rows, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
	src.exec(`ALTER TABLE public.refused RENAME COLUMN _row_exists TO row_exists;
		UPDATE public.refused SET v = 'renamed' WHERE id = 1`)
	if out, err := s.cli("resync", "--table", "public.refused", "--wait", "--timeout", "5m"); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, s.tail())
	}
	src.exec(`UPDATE public.plain SET v = 'after' WHERE id = 1; UPDATE public.refused SET v = 'after' WHERE id = 2`)
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		st, _ := s.cli("status")
		t.Fatalf("sluice wait after the rename and resync: %v\n%s\n%s", err, st, s.tail())
	}
	for _, table := range []string{"public.refused", "public.plain"} {
		if rows, diffs := oracle(t, src, s, table, []string{"tenant_id", "id"}); len(diffs) > 0 || rows == 0 {
			t.Errorf("%s after the recovery: %d rows checked, %d differences:\n%s", table, rows, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
		}
	}
}
