//go:build sluice_unsafe

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

// TestNegativeNoAutoResync is the negative control of
// TestAutoResyncOnSchemaChange: with SLUICE_UNSAFE_NO_AUTO_RESYNC=1 the
// reader ignores `ADD COLUMN x int DEFAULT 7`, and the oracle finds the
// older rows reading NULL where the source has 7.
func TestNegativeNoAutoResync(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.sc_items (tenant_id text NOT NULL, id bigint NOT NULL, v int NOT NULL, PRIMARY KEY (tenant_id, id));
		INSERT INTO public.sc_items SELECT 't' || (g % 4), g, g FROM generate_series(1, 200) g;`)
	s := newSluice(t, src.dsn, []string{"public.sc_items"}, "SLUICE_UNSAFE_NO_AUTO_RESYNC=1")
	s.start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("pipeline never live: %v\n%s", err, s.tail())
	}
	if len(s.dev.P.Grep("SLUICE_UNSAFE_NO_AUTO_RESYNC")) == 0 {
		t.Skip("sluice did not log SLUICE_UNSAFE_NO_AUTO_RESYNC: the hook is not wired")
	}
	src.exec(`ALTER TABLE public.sc_items ADD COLUMN x int DEFAULT 7`)
	src.exec(`INSERT INTO public.sc_items VALUES ('t1', 100001, 1, 8)`)
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("sluice wait: %v\n%s", err, s.tail())
	}
	rows, diffs := oracle(t, src, s, "public.sc_items", []string{"tenant_id", "id"})
	if len(diffs) == 0 {
		t.Fatalf("without the auto-resync the oracle found nothing in %d rows: the control does not bite", rows)
	}
	t.Logf("without the auto-resync: %d differences, e.g. %s", len(diffs), strings.Join(diffs[:min(len(diffs), 2)], "; "))
}
