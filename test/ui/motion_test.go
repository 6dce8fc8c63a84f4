package ui

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/shared/pgtest"
)

type seriesPage struct {
	Samples []struct {
		RowsIn *float64 `json:"rows_in_per_sec"`
	} `json:"samples"`
	Progress []struct {
		Table     string `json:"table"`
		Rows      int64  `json:"rows"`
		Estimated int64  `json:"estimated_rows"`
		Done      bool   `json:"done"`
	} `json:"progress"`
}

// until polls f every 250ms until it returns nil, failing t after d.
func until(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

var chartRE = regexp.MustCompile(`<div class="chart" id="chart-(\w+)" data-samples="(\d+)" data-last="([^"]*)">.*?<path class="line" d="([^"]*)"></path>.*?peak ([^<]*)</span>`)

type chart struct {
	samples    int
	last, path string
	peak       string
}

// charts reads the rendered charts of a dumped /ui.
func charts(t *testing.T, dom string) map[string]chart {
	t.Helper()
	out := map[string]chart{}
	for _, m := range chartRE.FindAllStringSubmatch(dom, -1) {
		n, _ := strconv.Atoi(m[2])
		out[m[1]] = chart{samples: n, last: m[3], path: m[4], peak: m[5]}
	}
	for _, k := range []string{"rows_in_per_sec", "rows_out_per_sec", "visible_lag_sec", "through_lag_bytes", "buffered_bytes", "packs_per_sec"} {
		if _, ok := out[k]; !ok {
			t.Fatalf("the page has no chart %s:\n%s", k, text(dom))
		}
	}
	return out
}

func shotDir() string { return os.Getenv("SLUICE_UI_SCREENSHOT_DIR") }

func screenshot(t *testing.T, browser, url, name string) {
	t.Helper()
	dir := shotDir()
	if dir == "" {
		return
	}
	path, _ := filepath.Abs(filepath.Join(dir, name))
	browse(t, browser, url, "--screenshot="+path, "--window-size=1400,1000", "--hide-scrollbars")
	t.Logf("screenshot %s", path)
}

// TestMotion renders /ui of a running demo twice in headless Chromium and
// checks that its charts move under the demo's traffic: the second render
// has more samples, a different rows-in line and a non-zero rows-in peak;
// then opens one destination's page and reads its state, its last packs
// (with the Jaeger link when a pack carries a trace) and its rows at a
// pinned snapshot, which equal the API's first page.
// SLUICE_UI_SCREENSHOT_DIR=docs keeps docs/ui-motion.png and
// docs/ui-destination.png.
func TestMotion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sluice dev with its demo Postgres")
	}
	browser := chromium(t)
	server := startDemo(t, 20)
	waitReady(t, server)

	var first seriesPage
	until(t, time.Minute, "the series never had two rows-in samples", func() error {
		if err := getJSON(server, "/api/v1/series", &first); err != nil {
			return err
		}
		n := 0
		for _, s := range first.Samples {
			if s.RowsIn != nil {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d samples with a rows-in rate", n)
		}
		return nil
	})
	dom1 := browse(t, browser, server+"/ui", "--dump-dom")
	c1 := charts(t, dom1)
	until(t, time.Minute, "no new sample", func() error {
		var s seriesPage
		if err := getJSON(server, "/api/v1/series", &s); err != nil {
			return err
		}
		// The chart counts the samples with a rows-in rate (the first
		// sample has none): compare those, not every sample, or a series
		// one sample ahead of the chart passes at once and the second
		// render draws what the first did.
		n := 0
		for _, x := range s.Samples {
			if x.RowsIn != nil {
				n++
			}
		}
		if n <= c1["rows_in_per_sec"].samples {
			return fmt.Errorf("%d samples with a rows-in rate, the first render had %d", n, c1["rows_in_per_sec"].samples)
		}
		return nil
	})
	dom2 := browse(t, browser, server+"/ui", "--dump-dom")
	c2 := charts(t, dom2)
	a, b := c1["rows_in_per_sec"], c2["rows_in_per_sec"]
	if b.samples <= a.samples || b.path == a.path {
		t.Fatalf("the rows-in chart did not move: %d samples then %d, same line %v", a.samples, b.samples, b.path == a.path)
	}
	if b.peak == "0" || b.peak == "" {
		t.Fatalf("the rows-in chart shows no traffic (peak %q) under the demo's", b.peak)
	}
	t.Logf("rows in: %d samples (last %s, peak %s) then %d (last %s, peak %s)", a.samples, a.last, a.peak, b.samples, b.last, b.peak)
	screenshot(t, browser, server+"/ui", "ui-motion.png")

	// A destination's page: state, last packs, rows at a pinned snapshot.
	const dest, table = "t001", "public.orders"
	var snap uint64
	var want struct {
		Rows []map[string]any `json:"rows"`
	}
	until(t, time.Minute, "t001 never had orders in a snapshot", func() error {
		var tp struct {
			Snapshot uint64   `json:"snapshot"`
			Tables   []string `json:"tables"`
		}
		if err := getJSON(server, "/api/v1/tables?destination="+dest, &tp); err != nil {
			return err
		}
		if !strings.Contains(strings.Join(tp.Tables, ","), table) {
			return fmt.Errorf("tables %v at v%d", tp.Tables, tp.Snapshot)
		}
		snap = tp.Snapshot
		return getJSON(server, fmt.Sprintf("/api/v1/rows?destination=%s&table=%s&snapshot=%d&limit=50", dest, table, snap), &want)
	})
	page := fmt.Sprintf("%s/ui?destination=%s&table=%s&snapshot=%d", server, dest, url.QueryEscape(table), snap)
	dom := browse(t, browser, page, "--dump-dom")
	// Packs are read after the render: every pack the page shows is one
	// the inventory holds by then.
	var packs struct {
		Packs []struct {
			PackID string `json:"pack_id"`
			Trace  string `json:"traceparent"`
		} `json:"packs"`
	}
	if err := getJSON(server, "/api/v1/packs?limit=1000&destination="+dest, &packs); err != nil || len(packs.Packs) == 0 {
		t.Fatalf("packs of %s: %+v %v", dest, packs, err)
	}
	known := map[string]bool{}
	hasTrace := false
	for _, p := range packs.Packs {
		known[p.PackID] = true
		hasTrace = hasTrace || p.Trace != ""
	}
	shown := regexp.MustCompile(`<tr><td>([^<]+)</td><td>[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*</td>`).FindAllStringSubmatch(table2(t, dom, "d-packs"), -1)
	if len(shown) != min(10, len(packs.Packs)) {
		t.Fatalf("the destination page shows %d packs, want %d: %s", len(shown), min(10, len(packs.Packs)), text(table2(t, dom, "d-packs")))
	}
	for _, m := range shown {
		if !known[m[1]] {
			t.Fatalf("the destination page shows pack %s, which %s does not hold", m[1], dest)
		}
	}
	if !regexp.MustCompile(`id="d-state">.*class="state s-\w+"`).MatchString(dom) {
		t.Fatalf("the destination page shows no state: %s", text(dom))
	}
	if hasTrace && !strings.Contains(dom, `id="d-jaeger" href="`+jaegerUI+`/trace/`) {
		t.Fatalf("packs carry traces but the page has no Jaeger link: %s", text(dom))
	}
	t.Logf("packs carry traces: %v", hasTrace)
	if want := fmt.Sprintf("at snapshot v%d", snap); !strings.Contains(dom, want) {
		t.Fatalf("the destination page does not say %q: %s", want, text(dom))
	}
	rows := table2(t, dom, "d-rows")
	head := regexp.MustCompile(`<th>([^<]*)</th>`).FindAllStringSubmatch(rows, -1)
	idCol := -1
	for i, h := range head {
		if h[1] == "id" {
			idCol = i
		}
	}
	if idCol < 0 {
		t.Fatalf("the rows table has no id column: %s", text(rows))
	}
	var got []string
	for _, tr := range regexp.MustCompile(`(?s)<tr>(.*?)</tr>`).FindAllStringSubmatch(rows, -1)[1:] {
		cells := regexp.MustCompile(`<td class="cell">(.*?)</td>`).FindAllStringSubmatch(tr[1], -1)
		if len(cells) != len(head) {
			t.Fatalf("a row with %d cells under %d columns: %s", len(cells), len(head), tr[1])
		}
		got = append(got, text(cells[idCol][1]))
	}
	var ids []string
	for _, r := range want.Rows {
		ids = append(ids, fmt.Sprint(r["id"]))
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") || len(ids) == 0 {
		t.Fatalf("the page shows ids %v of %s at v%d, the API %v", got, dest, snap, ids)
	}
	screenshot(t, browser, page, "ui-destination.png")
}

// table2 is table for a table whose tag may carry more than its id.
func table2(t *testing.T, dom, id string) string {
	t.Helper()
	start := strings.Index(dom, `<table id="`+id+`"`)
	if start < 0 {
		t.Fatalf("the page has no table %s:\n%s", id, text(dom))
	}
	end := strings.Index(dom[start:], "</table>")
	return dom[start : start+end]
}

var progRE = regexp.MustCompile(`<div class="prog( done)?" data-kind="backfill" data-table="([^"]+)" data-done="(true|false)" data-rows="(\d+)" data-estimated="(\d+)">.*?<div class="fill" style="width:\s*([\d.]+)%;?"></div>`)

type bar struct {
	done           bool
	rows, estimate int64
	width          float64
}

func bars(dom string) map[string]bar {
	out := map[string]bar{}
	for _, m := range progRE.FindAllStringSubmatch(dom, -1) {
		r, _ := strconv.ParseInt(m[4], 10, 64)
		e, _ := strconv.ParseInt(m[5], 10, 64)
		w, _ := strconv.ParseFloat(m[6], 64)
		out[m[2]] = bar{done: m[3] == "true", rows: r, estimate: e, width: w}
	}
	return out
}

// TestBackfillProgress runs `sluice dev` on a source with two tables to
// copy. The reader copies as a role that row-level security applies to,
// and the held table's policy takes a shared advisory lock the test holds
// exclusively (an advisory lock writes no WAL and takes no transaction id,
// so the reader's slot creation does not wait for it, while its copy of
// that table does): /ui shows the held table as a running progress bar at
// 0 of its pg_class.reltuples estimate beside the other table's finished
// bar; once the test lets go, the bar completes.
func TestBackfillProgress(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sluice dev")
	}
	browser := chromium(t)
	dsn := pgtest.NewDB(t)
	pgtest.Exec(t, dsn, `
DO $$ BEGIN CREATE ROLE sluice_ui_reader LOGIN REPLICATION; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO sluice_ui_reader', current_database()); END $$;
CREATE TABLE public.quick (tenant_id text NOT NULL, id bigint NOT NULL, pad text, PRIMARY KEY (tenant_id, id));
CREATE TABLE public.held (tenant_id text NOT NULL, id bigint NOT NULL, pad text, PRIMARY KEY (tenant_id, id));
INSERT INTO public.quick SELECT 't' || (g % 5), g, repeat('q', 20) FROM generate_series(1, 3000) g;
INSERT INTO public.held SELECT 't' || (g % 5), g, repeat('h', 20) FROM generate_series(1, 4000) g;
ANALYZE public.quick; ANALYZE public.held;
GRANT SELECT ON public.quick, public.held TO sluice_ui_reader;
CREATE FUNCTION public.gate() RETURNS boolean VOLATILE LANGUAGE plpgsql AS $f$ BEGIN PERFORM pg_advisory_lock_shared(4242); RETURN true; END $f$;
ALTER TABLE public.held ENABLE ROW LEVEL SECURITY;
CREATE POLICY gate ON public.held FOR SELECT USING (public.gate());
CREATE PUBLICATION sluice_ui FOR TABLE public.quick, public.held WITH (publish_via_partition_root = true);`)
	ctx := context.Background()
	lock, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx)
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_lock(4242)"); err != nil {
		t.Fatal(err)
	}
	readerDSN, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	readerDSN.User = url.User("sluice_ui_reader")
	// activity is what the source is doing: the waits behind a stuck start.
	activity := func() string {
		rows, err := lock.Query(ctx, "SELECT usename || ' ' || coalesce(wait_event_type, '') || ':' || coalesce(wait_event, '') || ' ' || left(query, 160) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
		if err != nil {
			return err.Error()
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			out = append(out, s)
		}
		return strings.Join(out, "\n")
	}
	server := startDev(t, fmt.Sprintf(`source:
  dsn: %s
  tables: [public.quick, public.held]
  routing_column: tenant_id
  slot: sluice_ui
  publication: sluice_ui
  backfill: true
demo:
  tenants: 1
`, readerDSN))

	until(t, 90*time.Second, "the held table's backfill never showed as running", func() error {
		var s seriesPage
		if err := getJSON(server, "/api/v1/series", &s); err != nil {
			return err
		}
		for _, p := range s.Progress {
			if p.Table == "public.held" && !p.Done && p.Estimated > 0 {
				return nil
			}
		}
		return fmt.Errorf("progress %+v; source sessions:\n%s", s.Progress, activity())
	})
	dom := browse(t, browser, server+"/ui", "--dump-dom")
	bs := bars(dom)
	h, ok := bs["public.held"]
	if !ok || h.done || h.rows != 0 || h.estimate < 3000 || h.width >= 100 {
		t.Fatalf("the held table's bar %+v (found %v), want running at 0 of ~4,000 rows:\n%s", h, ok, text(dom))
	}
	if !strings.Contains(text(dom), "0 / ~"+fmt.Sprintf("%s", commas(h.estimate))+" rows") {
		t.Fatalf("the held table's bar does not say 0 / ~%d rows: %s", h.estimate, text(dom))
	}
	screenshot(t, browser, server+"/ui", "ui-backfill.png")

	if _, err := lock.Exec(ctx, "SELECT pg_advisory_unlock(4242)"); err != nil {
		t.Fatal(err)
	}
	until(t, 2*time.Minute, "the held table's backfill never finished", func() error {
		var s seriesPage
		if err := getJSON(server, "/api/v1/series", &s); err != nil {
			return err
		}
		for _, p := range s.Progress {
			if p.Table == "public.held" && p.Done && p.Rows == 4000 {
				return nil
			}
		}
		return fmt.Errorf("progress %+v", s.Progress)
	})
	dom = browse(t, browser, server+"/ui", "--dump-dom")
	if h := bars(dom)["public.held"]; !h.done || h.rows != 4000 || h.width != 100 {
		t.Fatalf("after the lock the held table's bar is %+v, want done at 4,000 rows", h)
	}
}

// commas writes n as toLocaleString("en-US") does.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
