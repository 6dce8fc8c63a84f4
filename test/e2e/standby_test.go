package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgcluster"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

// startStandbyPair starts a Postgres 16+ primary and a hot standby that
// streams from it through the physical slot sb1 with hot_standby_feedback
// on, each with the database app. Without the binaries (make pg-bins) the
// test fails under CI and skips elsewhere.
func startStandbyPair(t *testing.T) (primary, standby *pgcluster.Cluster) {
	t.Helper()
	bindir := pgtest.NeedBinaries(t, func() (string, error) { return pgcluster.BinDirAtLeast(16) })
	p, s := pgtest.Pair(t, pgtest.PairOptions{BinDir: bindir, Databases: []string{"app"}, Slot: "sb1"})
	v, _ := pgcluster.Version(bindir)
	t.Logf("Postgres %s: primary on port %d, standby on port %d", v, p.Port(), s.Port())
	return p, s
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
	st := s.readerStatus(t).Standby
	if st == nil || st.Primary != fmt.Sprintf("127.0.0.1:%d", primary.Port()) || st.ReplayLSN == "" {
		t.Fatalf("the status does not say the reader decodes from a standby writing to the primary: %+v", st)
	}

	stopLoad := divergedUnderLoad(ctx, t, pri, s)
	defer stopLoad()

	id := s.startResync("--table", "public.rs_items")
	t.Logf("kill -9 at chunk %d", s.killDuringResync(id, 15))
	done := s.waitResyncDone(id)
	t.Logf("resync: %d rows in %d chunks, %d left to the stream, end %s", done.Rows, done.Chunks, done.Dropped, done.EndLSN)
	stopLoad()
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
	if st := s.readerStatus(t).Standby; st != nil {
		t.Logf("standby status at the end: replay %s, %d bytes behind the primary", st.ReplayLSN, st.LagBytes)
	}
}
