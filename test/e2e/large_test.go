package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

// TestLargeValues: rows with a 12 MB and a 200 MB value arrive intact
// through the whole pipeline (the reader carries them by reference through
// the pack store; the flusher puts them back into the pack) beside small
// rows of the same table written before, between and after them. Before,
// the 12 MB row halted the table and the later rows never arrived.
func TestLargeValues(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.blobs (tenant_id text NOT NULL, id bigint NOT NULL, title text, body text, PRIMARY KEY (tenant_id, id))`)
	s := newSluice(t, src.dsn, []string{"public.blobs"})
	s.start()
	const mb = 1 << 20
	for _, q := range []string{
		`INSERT INTO public.blobs VALUES ('a', 1, 'small', 'hello')`,
		fmt.Sprintf(`INSERT INTO public.blobs VALUES ('a', 2, 'twelve', repeat('x', %d))`, 12*mb),
		`INSERT INTO public.blobs VALUES ('b', 3, 'between', 'y')`,
		fmt.Sprintf(`INSERT INTO public.blobs VALUES ('b', 4, 'two hundred', repeat('z', %d))`, 200*mb),
		`UPDATE public.blobs SET title = 'twelve, renamed' WHERE id = 2`, // body TOAST-unchanged
		`INSERT INTO public.blobs VALUES ('a', 5, 'last', 'world')`,
	} {
		src.exec(q)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, s.tail())
	}
	rep, err := kit.Check(ctx, src.dsn, s.server, kit.CheckOptions{Tables: []kit.Table{{Name: "public.blobs", Keys: []string{"tenant_id", "id"}, Routing: "tenant_id"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	for _, d := range rep.Diffs {
		if len(d) > 400 {
			d = d[:400] + "…"
		}
		t.Error(d)
	}
	if rep.Rows != 5 {
		t.Errorf("checked %d rows, want 5", rep.Rows)
	}
}
