package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

// TestToastScenarios isolates the TOAST cases of the workload, one key per
// scenario, so a difference names the scenario that breaks rule 6
// (unchanged TOAST values never become NULL, or stale, downstream).
func TestToastScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.docs (tenant_id text NOT NULL, id bigint NOT NULL, title text NOT NULL, body text,
		PRIMARY KEY (tenant_id, id)); ALTER TABLE public.docs ALTER COLUMN body SET STORAGE EXTERNAL`)
	s := newSluice(t, src.dsn, []string{"public.docs"})
	s.start()
	body := func(c string) string { return "'" + strings.Repeat(c, 50000) + "'" }
	steps := []string{
		// s1: insert; update the title.
		`INSERT INTO public.docs VALUES ('a', 1, 't', ` + body("A") + `)`,
		`UPDATE public.docs SET title = 't2' WHERE tenant_id = 'a' AND id = 1`,
		// s2: insert; update the body; update the title.
		`INSERT INTO public.docs VALUES ('a', 2, 't', ` + body("A") + `)`,
		`UPDATE public.docs SET body = ` + body("B") + ` WHERE tenant_id = 'a' AND id = 2`,
		`UPDATE public.docs SET title = 't2' WHERE tenant_id = 'a' AND id = 2`,
		// s3: insert and update the title in one transaction.
		`BEGIN; INSERT INTO public.docs VALUES ('a', 3, 't', ` + body("A") + `); UPDATE public.docs SET title = 't2' WHERE tenant_id = 'a' AND id = 3; COMMIT`,
		// s4: insert; delete; re-insert with another body; update the title.
		`INSERT INTO public.docs VALUES ('a', 4, 't', ` + body("A") + `)`,
		`DELETE FROM public.docs WHERE tenant_id = 'a' AND id = 4`,
		`INSERT INTO public.docs VALUES ('a', 4, 't', ` + body("C") + `)`,
		`UPDATE public.docs SET title = 't2' WHERE tenant_id = 'a' AND id = 4`,
		// s5: insert; move to tenant b rewriting the body; update the title there.
		`INSERT INTO public.docs VALUES ('a', 5, 't', ` + body("A") + `)`,
		`UPDATE public.docs SET tenant_id = 'b', body = ` + body("D") + ` WHERE tenant_id = 'a' AND id = 5`,
		`UPDATE public.docs SET title = 't2' WHERE tenant_id = 'b' AND id = 5`,
		// s6: insert; body and title in one statement; title again.
		`INSERT INTO public.docs VALUES ('a', 6, 't', ` + body("A") + `)`,
		`UPDATE public.docs SET title = 't1', body = ` + body("B") + ` WHERE tenant_id = 'a' AND id = 6`,
		`UPDATE public.docs SET title = 't2' WHERE tenant_id = 'a' AND id = 6`,
		// s7: in one transaction: title, body, title.
		`INSERT INTO public.docs VALUES ('a', 7, 't', ` + body("A") + `)`,
		`BEGIN; UPDATE public.docs SET title = 't1' WHERE tenant_id = 'a' AND id = 7; UPDATE public.docs SET body = ` + body("E") + ` WHERE tenant_id = 'a' AND id = 7; UPDATE public.docs SET title = 't2' WHERE tenant_id = 'a' AND id = 7; COMMIT`,
		// s8: away and back, rewriting the body each time; then the title.
		`INSERT INTO public.docs VALUES ('a', 8, 't', ` + body("A") + `)`,
		`UPDATE public.docs SET tenant_id = 'b', body = ` + body("D") + ` WHERE tenant_id = 'a' AND id = 8`,
		`UPDATE public.docs SET tenant_id = 'a', body = ` + body("F") + ` WHERE tenant_id = 'b' AND id = 8`,
		`UPDATE public.docs SET title = 't2' WHERE tenant_id = 'a' AND id = 8`,
		// s9: a short body (inline, not TOASTed) then the title.
		`INSERT INTO public.docs VALUES ('a', 9, 't', 'short')`,
		`UPDATE public.docs SET title = 't2' WHERE tenant_id = 'a' AND id = 9`,
		// s10: NULL body then the title.
		`INSERT INTO public.docs VALUES ('a', 10, 't', NULL)`,
		`UPDATE public.docs SET title = 't2' WHERE tenant_id = 'a' AND id = 10`,
		// s11 (the workload's MoveToast): move to tenant b leaving the body unchanged.
		`INSERT INTO public.docs VALUES ('a', 11, 't', ` + body("A") + `)`,
		`UPDATE public.docs SET tenant_id = 'b' WHERE tenant_id = 'a' AND id = 11`,
	}
	for _, q := range steps {
		src.exec(q)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, s.tail())
	}
	rep, err := kit.Check(ctx, src.dsn, s.server, kit.CheckOptions{Tables: []kit.Table{{Name: "public.docs", Keys: []string{"tenant_id", "id"}, Routing: "tenant_id"}}})
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
}
