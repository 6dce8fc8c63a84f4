package e2e

import (
	"testing"

	"github.com/sluice-cdc/sluice/shared/pgtest"
)

// TestContractOneProcess is the contract smoke as a Go test: backfill, live
// changes (updates, deletes, a new tenant), sluice wait, and the oracle over
// every tenant.
func TestContractOneProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.items (tenant_id text NOT NULL, id bigint NOT NULL, name text,
  price numeric(10,2), seen timestamptz, tags text[], attrs jsonb, PRIMARY KEY (tenant_id, id))`)
	src.exec(`INSERT INTO public.items SELECT 'shop' || (g % 3), g, 'item ' || g, g * 1.25, '2026-01-01 00:00:00+00', ARRAY['a'], jsonb_build_object('g', g) FROM generate_series(1, 300) g`)
	s := newSluice(t, src.dsn, []string{"public.items"})
	s.start()
	src.exec(`UPDATE public.items SET price = price + 1, tags = tags || 'b'::text WHERE id % 4 = 0`)
	src.exec(`DELETE FROM public.items WHERE id % 10 = 0`)
	src.exec(`INSERT INTO public.items VALUES ('shop9', 1, NULL, NULL, NULL, NULL, NULL)`)
	lsn := src.lsn()
	if _, err := s.cli("wait", "--through-lsn", lsn, "--timeout", "180s"); err != nil {
		t.Fatalf("%v\nlog:\n%s", err, s.tail())
	}
	n, diffs := oracle(t, src, s, "public.items", []string{"tenant_id", "id"})
	for _, d := range diffs {
		t.Error(d)
	}
	if n != 271 {
		t.Errorf("checked %d rows, want 271", n)
	}
	t.Logf("%d rows checked, %d differences", n, len(diffs))
}
