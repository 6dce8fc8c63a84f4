package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/shared/pgcluster"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/state"
	"github.com/sluice-cdc/sluice/test/kit"
)

// startStandbyPair starts a Postgres 16+ primary and a hot standby that
// streams from it through the physical slot sb1 with hot_standby_feedback
// on, each with the database app. Without the binaries (make pg-bins) the
// test fails under CI and skips elsewhere.
func startStandbyPair(t *testing.T) (primary, standby *pgcluster.Cluster) {
	t.Helper()
	bindir, err := pgcluster.BinDirAtLeast(16)
	if err != nil {
		msg := fmt.Sprintf("decoding from a standby needs Postgres 16+ server binaries: %v (make pg-bins)", err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	root, err := os.MkdirTemp("", "sluice-e2e-standby-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777); err != nil { // the server runs as postgres
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(root, "primary"), BinDir: bindir, Settings: pgtest.Settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	if err := p.Watchdog(os.Getpid(), ""); err != nil {
		t.Fatal(err)
	}
	if err := p.CreateDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	s, err := pgcluster.StartStandby(ctx, p, pgcluster.StandbyOptions{
		Options: pgcluster.Options{Dir: filepath.Join(root, "standby"), Settings: pgtest.Settings}, Slot: "sb1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Kill() })
	if err := s.Watchdog(os.Getpid(), ""); err != nil {
		t.Fatal(err)
	}
	v, _ := pgcluster.Version(bindir)
	t.Logf("Postgres %s: primary on port %d, standby on port %d", v, p.Port(), s.Port())
	return p, s
}

// standbyStatus is services.reader.standby in `sluice status --json`.
type standbyStatus struct {
	Primary   string `json:"primary"`
	ReplayLSN string `json:"replay_lsn"`
	LagBytes  int64  `json:"lag_bytes"`
}

func (s *sluice) standbyStatus(t *testing.T) (*standbyStatus, string) {
	t.Helper()
	out, err := s.cli("status", "--json")
	if err != nil {
		t.Fatalf("sluice status --json: %v\n%s", err, out)
	}
	var st struct {
		Services struct {
			Reader struct {
				Standby *standbyStatus `json:"standby"`
			} `json:"reader"`
		} `json:"services"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("decoding sluice status --json: %v\n%s", err, out)
	}
	return st.Services.Reader.Standby, out
}

// TestStandbyDecoding: `sluice dev` decodes from a hot standby (source.dsn)
// and writes to its primary (SLUICE_SOURCE_PRIMARY_DSN: the publication,
// the resync watermarks, and its state, kept in the source). Rows are
// backfilled at the standby slot's snapshot; a steady load of inserts,
// updates and deletes runs on the primary; the copy is made to diverge
// (rows changed and deleted outside the publication) and a resync of the
// table runs under the load, during which sluice is killed with SIGKILL and
// started again; the resync continues, and the oracle finds every tenant's
// copy equal to the primary. The status says the reader decodes from a
// standby and names the primary's host, and the slot is on the standby.
func TestStandbyDecoding(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	primary, standby := startStandbyPair(t)
	pri := &pg{t: t, dsn: primary.DSN("app")}
	pri.exec(`CREATE TABLE public.rs_items (tenant_id text NOT NULL, id bigint NOT NULL, v bigint NOT NULL, PRIMARY KEY (tenant_id, id));
		INSERT INTO public.rs_items SELECT 't' || (g % 20), g, g FROM generate_series(1, 20000) g; ANALYZE public.rs_items;`)
	s := newSluice(t, standby.DSN("app"), []string{"public.rs_items"},
		"SLUICE_SOURCE_PRIMARY_DSN="+primary.DSN("app"), "SLUICE_SOURCE_RESYNC_CHUNK_ROWS=200")
	t.Cleanup(func() { artifacts(t, s.dev.Dir) })
	s.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	started := time.Now()
	if _, err := kit.Wait(ctx, s.server, pri.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("pipeline never live: %v\n%s", err, s.tail())
	}
	t.Logf("backfilled from the standby and live in %s", time.Since(started).Round(time.Millisecond))
	st, raw := s.standbyStatus(t)
	if st == nil || st.Primary != fmt.Sprintf("127.0.0.1:%d", primary.Port()) || st.ReplayLSN == "" {
		t.Fatalf("the status does not say the reader decodes from a standby writing to the primary: %+v\n%s", st, raw)
	}
	if strings.Contains(raw, "postgres@") {
		t.Fatalf("the status shows a DSN's user:\n%s", raw)
	}

	diverge(pri, "public.rs_items",
		`DELETE FROM public.rs_items WHERE id % 37 = 0`,
		`UPDATE public.rs_items SET v = -v WHERE id % 41 = 0`)
	if _, err := kit.Wait(ctx, s.server, pri.lsn(), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, diffs := oracle(t, pri, s, "public.rs_items", []string{"tenant_id", "id"}); len(diffs) == 0 {
		t.Fatal("the copy did not diverge: the resync would prove nothing")
	}

	pool, err := pgxpool.New(ctx, pri.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	lctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go load(lctx, t, pool, &wg)
	defer func() { stopLoad(); wg.Wait() }()

	id := s.startResync("--table", "public.rs_items")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		r := s.resync(id)
		if r.State == state.ResyncDone {
			t.Fatalf("the resync finished before the kill (chunks %d): make the chunks smaller", r.Chunks)
		}
		if r.Chunks >= 15 {
			t.Logf("kill -9 at chunk %d", r.Chunks)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resync at %d chunks after 3 minutes\n%s", r.Chunks, s.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.dev.P.Kill()
	s.start()
	var done state.Resync
	deadline = time.Now().Add(5 * time.Minute)
	for {
		done = s.resync(id)
		if done.State == state.ResyncFailed {
			t.Fatalf("resync failed: %s\n%s", done.Error, s.tail())
		}
		if done.State == state.ResyncDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resync not done: %+v\n%s", done, s.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("resync: %d rows in %d chunks, %d left to the stream, end %s", done.Rows, done.Chunks, done.Dropped, done.EndLSN)
	stopLoad()
	wg.Wait()
	if _, err := kit.Wait(ctx, s.server, pri.lsn(), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if rows, diffs := oracle(t, pri, s, "public.rs_items", []string{"tenant_id", "id"}); len(diffs) > 0 {
		t.Fatalf("decoding from the standby, %d rows checked, %d differences:\n%s", rows, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	} else {
		t.Logf("oracle: %d rows, 0 differences", rows)
	}
	sb := &pg{t: t, dsn: standby.DSN("app")}
	if got := sb.strings(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_type = 'logical'`)[0]; got != "1" {
		t.Errorf("%s logical slots on the standby, want the reader's", got)
	}
	if got := pri.strings(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_type = 'logical'`)[0]; got != "0" {
		t.Errorf("%s logical slots on the primary, want none", got)
	}
	if st, _ := s.standbyStatus(t); st != nil {
		t.Logf("standby status at the end: replay %s, %d bytes behind the primary", st.ReplayLSN, st.LagBytes)
	}
}
