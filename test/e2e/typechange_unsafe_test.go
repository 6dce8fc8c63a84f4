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

// TestNegativeNoKnownKinds is the negative control of
// TestTypeChangeHaltsThenResyncRecovers: with SLUICE_UNSAFE_NO_KNOWN_KINDS=1
// the reader compares a Relation message only with the session's previous
// one, so a type changed before the table's first change in the session
// streams under the new kind without a halt; the catalog's new generation
// holds only the rows changed since, and the oracle finds the others
// missing.
func TestNegativeNoKnownKinds(t *testing.T) {
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(typeChangeTable)
	s := newSluice(t, src.dsn, []string{"public.tc_items"}, "SLUICE_UNSAFE_NO_KNOWN_KINDS=1")
	s.start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("pipeline never live: %v\n%s", err, s.tail())
	}
	if len(s.dev.P.Grep("SLUICE_UNSAFE_NO_KNOWN_KINDS")) == 0 {
		t.Skip("sluice did not log SLUICE_UNSAFE_NO_KNOWN_KINDS: the hook is not wired")
	}
	src.exec(`ALTER TABLE public.tc_items ALTER COLUMN v TYPE text USING 'v' || v`)
	src.exec(`UPDATE public.tc_items SET v = 'u' || id WHERE id % 11 = 0`)
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("sluice wait: %v\n%s", err, s.tail())
	}
	if st, _ := s.cli("status"); strings.Contains(st, "halted table public.tc_items") {
		t.Fatalf("the table halted without the known kinds: the control does not switch the rule off\n%s", st)
	}
	rows, diffs := oracle(t, src, s, "public.tc_items", []string{"tenant_id", "id"})
	if len(diffs) == 0 {
		t.Fatalf("without the known kinds the oracle found nothing in %d rows: the control does not bite", rows)
	}
	t.Logf("without the known kinds: %d differences, e.g. %s", len(diffs), strings.Join(diffs[:min(len(diffs), 2)], "; "))
}
