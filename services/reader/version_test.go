package reader

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/pgcluster"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/state"
)

// The test cluster's server (whichever version SLUICE_PG_BINDIR names, 14
// to 18) passes the version check, which reads the version the server
// reports.
func TestServerVersionAccepted(t *testing.T) {
	e := newEnv(t, "public.items")
	pool := e.statePool()
	defer pool.Close()
	v, err := source.CheckServerVersion(context.Background(), pool)
	if err != nil {
		t.Fatalf("the test server (Postgres %s) is refused: %v", pgtest.Version(t), err)
	}
	if v.Major() != pgtest.Major(t) || v.Text != pgtest.Version(t) {
		t.Fatalf("read Postgres %s (major %d), the test server is %s", v.Text, v.Major(), pgtest.Version(t))
	}
	t.Logf("Postgres %s (server_version_num %d) accepted", v.Text, v.Num)
}

// pg13BinDir is where deploy/fetch-postgres.sh 13 puts Postgres 13's
// server binaries (SLUICE_PG13_BINDIR overrides); "" when they are not
// there.
func pg13BinDir() string {
	dirs := []string{os.Getenv("SLUICE_PG13_BINDIR")}
	if os.Geteuid() == 0 {
		dirs = append(dirs, "/var/cache/sluice/postgres/13/bin")
	} else if c, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(c, "sluice", "postgres", "13", "bin"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if st, err := os.Stat(filepath.Join(d, "postgres")); err == nil && !st.IsDir() {
			return d
		}
	}
	return ""
}

// A reader whose source is Postgres 13 refuses to start, and says which
// version the server is and which it needs. A real Postgres 13 (the npm
// build deploy/fetch-postgres.sh fetches; make test fetches it): without
// it the test fails under CI and skips, saying how to get it, elsewhere.
func TestRefusesPostgres13(t *testing.T) {
	bindir := pg13BinDir()
	if bindir == "" {
		msg := "Postgres 13's server binaries are missing: run deploy/fetch-postgres.sh 13 (or set SLUICE_PG13_BINDIR)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	e := newEnv(t, "public.items")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := pgtest.Own(t, bindir, nil)
	e.cfg.Source.DSN = c.DSN("postgres")
	// A table the reader would capture: it is the version it refuses.
	pgtest.Exec(t, e.cfg.Source.DSN, `CREATE TABLE items (tenant_id text, id int, PRIMARY KEY (tenant_id, id))`)
	r := e.newReader("v", nil)
	pool := e.statePool() // the state stays on the test cluster
	defer pool.Close()
	r.deps.State = pool
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	err := r.Run(rctx)
	if err == nil || !errors.Is(err, source.ErrInvalidSource) {
		t.Fatalf("a reader on Postgres 13 returned %v, want a refusal (ErrInvalidSource)", err)
	}
	want, _ := pgcluster.Version(bindir)
	for _, s := range []string{"Postgres " + want, "Postgres 14 or newer"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the refusal %q does not say %q", err, s)
		}
	}
	t.Log(err)
	// Nothing was created on the refused server.
	src, err := pgxpool.New(ctx, c.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var slots, pubs int
	if err := src.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots), (SELECT count(*) FROM pg_publication)`).Scan(&slots, &pubs); err != nil {
		t.Fatal(err)
	}
	if slots != 0 || pubs != 0 {
		t.Errorf("the refused server has %d slots and %d publications, want none", slots, pubs)
	}
}

// Postgres 18's publications can publish stored generated columns
// (publish_generated_columns = stored; the default, none, is what every
// earlier version does). The reader computes them itself and refuses a
// publication that publishes them, saying what to run: its stream carries a
// column the periodic schema check does not list, which the check took for
// a column added with a default (on 18.4, before the refusal: the
// insert-update-update below queued a resync and streamed a fourth, copied
// row). With the setting back to none it streams the values it computes and
// queues no resync.
func TestPublishedGeneratedColumns(t *testing.T) {
	if m := pgtest.Major(t); m < 18 {
		t.Skipf("publish_generated_columns is new in Postgres 18; this server is %s", pgtest.Version(t))
	}
	e := newEnv(t, "public.g")
	pub := e.cfg.Source.Publication
	e.exec(`CREATE TABLE g (tenant_id text, id int, v int, dbl int GENERATED ALWAYS AS (v * 2) STORED, w int, PRIMARY KEY (tenant_id, id));
		CREATE PUBLICATION ` + pub + ` FOR TABLE g WITH (publish_via_partition_root = true, publish_generated_columns = stored)`)
	r := e.newReader("a", nil)
	pool := e.statePool()
	defer pool.Close()
	r.deps.State = pool
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := r.Run(ctx)
	want := "ALTER PUBLICATION " + pgx.Identifier{pub}.Sanitize() + " SET (publish_generated_columns = none);"
	if err == nil || !errors.Is(err, source.ErrInvalidSource) || !strings.Contains(err.Error(), want) {
		t.Fatalf("a publication publishing generated columns: got %v, want a refusal saying %q", err, want)
	}
	t.Log(err)

	e.exec(`ALTER PUBLICATION ` + pub + ` SET (publish_generated_columns = none)`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO g (tenant_id, id, v, w) VALUES ('t', 1, 5, 1)`)
	e.exec(`UPDATE g SET v = 7 WHERE id = 1`)
	time.Sleep(3 * time.Second) // the periodic schema check runs every second
	e.exec(`UPDATE g SET w = 2 WHERE id = 1`)
	rows := waitRows(t, e, 3)
	time.Sleep(time.Second)
	rows, _, _ = e.changes()
	if got := generatedOf(rows, "dbl"); got != "[10 14 14]" {
		t.Errorf("dbl in insert, update, update: %s; want [10 14 14]", got)
	}
	list, err := state.NewResyncs(run.pool, e.cfg.State.Schema).List(context.Background(), e.cfg.Source.Slot, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list {
		t.Errorf("resync %d of %s queued (%s): the schema did not change", r.ID, r.Table, r.Reason)
	}
}
