package ui

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/shared/pgtest"
)

type resyncSeries struct {
	Progress []struct {
		Kind      string `json:"kind"`
		Table     string `json:"table"`
		Rows      int64  `json:"rows"`
		Estimated int64  `json:"estimated_rows"`
		Chunks    int64  `json:"chunks"`
		Done      bool   `json:"done"`
	} `json:"progress"`
}

var resyncBarRE = regexp.MustCompile(`<div class="prog" data-kind="resync" data-table="public\.held" data-done="false" data-rows="(\d+)" data-estimated="(\d+)">.*?<div class="fill" style="width:\s*([\d.]+)%;?"></div>.*?(\d+) chunks`)

// TestResyncProgress runs `sluice dev` on a source whose table public.held
// is resynced while row-level security holds the chunk past tenants t0 and t1 (3,200 rows) (its
// policy takes a shared advisory lock the test holds exclusively, as in
// TestBackfillProgress), and a second table halts (a replica identity
// without the routing column): /ui shows the running resync as a bar with
// its rows of the pg_class.reltuples estimate and its chunks, and the
// halted table with the command that recovers it. Once the test lets go
// the resync completes. SLUICE_UI_SCREENSHOT_DIR=docs keeps
// docs/ui-resync.png.
func TestResyncProgress(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sluice dev")
	}
	browser := chromium(t)
	dsn := pgtest.NewDB(t)
	pgtest.Exec(t, dsn, `
DO $$ BEGIN CREATE ROLE sluice_ui_reader LOGIN REPLICATION; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO sluice_ui_reader', current_database()); END $$;
CREATE TABLE public.held (tenant_id text NOT NULL, id bigint NOT NULL, pad text, PRIMARY KEY (tenant_id, id));
CREATE TABLE public.stuck (tenant_id text NOT NULL, id bigint NOT NULL, PRIMARY KEY (tenant_id, id));
CREATE UNIQUE INDEX stuck_id ON public.stuck (id);
INSERT INTO public.held SELECT 't' || (g % 5), g, repeat('h', 20) FROM generate_series(1, 8000) g;
INSERT INTO public.stuck SELECT 't1', g FROM generate_series(1, 10) g;
ANALYZE public.held;
GRANT SELECT ON public.held, public.stuck TO sluice_ui_reader;
CREATE FUNCTION public.gate() RETURNS boolean VOLATILE LANGUAGE plpgsql AS $f$ BEGIN PERFORM pg_advisory_lock_shared(4343); RETURN true; END $f$;
ALTER TABLE public.held ENABLE ROW LEVEL SECURITY;
CREATE POLICY gate ON public.held FOR SELECT USING (tenant_id IN ('t0', 't1') OR public.gate());
CREATE PUBLICATION sluice_ui FOR TABLE public.held, public.stuck WITH (publish_via_partition_root = true);`)
	ctx := context.Background()
	lock, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx)
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_lock(4343)"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = lock.Exec(ctx, "SELECT pg_advisory_unlock(4343)") }()
	readerDSN, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	readerDSN.User = url.User("sluice_ui_reader")
	server := startDev(t, fmt.Sprintf(`source:
  dsn: %s
  tables: [public.held, public.stuck]
  routing_column: tenant_id
  slot: sluice_ui_resync
  publication: sluice_ui
  backfill: false
  resync_chunk_rows: 500
demo:
  tenants: 1
`, readerDSN))
	until(t, 90*time.Second, "the reader never streamed", func() error {
		var st struct {
			Services struct {
				Reader struct {
					State string `json:"state"`
				} `json:"reader"`
			} `json:"services"`
		}
		if err := getJSON(server, "/api/v1/status", &st); err != nil {
			return err
		}
		if st.Services.Reader.State != "streaming" {
			return fmt.Errorf("reader %q", st.Services.Reader.State)
		}
		return nil
	})
	pgtest.Exec(t, dsn, `ALTER TABLE public.stuck REPLICA IDENTITY USING INDEX stuck_id; UPDATE public.stuck SET id = id + 100 WHERE id = 1`)

	req, err := http.NewRequest(http.MethodPost, server+"/api/v1/resyncs", bytes.NewReader([]byte(`{"table": "public.held"}`)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Sluice-Client", "ui-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /api/v1/resyncs: %s", resp.Status)
	}
	until(t, 90*time.Second, "the resync never showed as running past the first chunks", func() error {
		var s resyncSeries
		if err := getJSON(server, "/api/v1/series", &s); err != nil {
			return err
		}
		for _, p := range s.Progress {
			if p.Kind == "resync" && p.Table == "public.held" && !p.Done && p.Rows >= 3000 {
				return nil
			}
		}
		return fmt.Errorf("progress %+v", s.Progress)
	})
	var dom string
	until(t, 30*time.Second, "the page never showed the halted table", func() error {
		dom = browse(t, browser, server+"/ui", "--dump-dom")
		if !strings.Contains(text(dom), "sluice resync --table public.stuck") {
			return fmt.Errorf("no halted table with its command: %s", text(dom))
		}
		return nil
	})
	m := resyncBarRE.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no running resync bar of public.held: %s", text(dom))
	}
	if m[1] != "3000" || m[2] != "8000" || m[4] != "6" {
		t.Errorf("the resync bar shows %s of ~%s rows in %s chunks, want 3000 of ~8000 in 6", m[1], m[2], m[4])
	}
	screenshot(t, browser, server+"/ui", "ui-resync.png")

	if _, err := lock.Exec(ctx, "SELECT pg_advisory_unlock(4343)"); err != nil {
		t.Fatal(err)
	}
	until(t, 2*time.Minute, "the resync never finished", func() error {
		var s resyncSeries
		if err := getJSON(server, "/api/v1/series", &s); err != nil {
			return err
		}
		for _, p := range s.Progress {
			if p.Kind == "resync" && p.Table == "public.held" && p.Done && p.Rows == 8000 {
				return nil
			}
		}
		return fmt.Errorf("progress %+v", s.Progress)
	})
}
