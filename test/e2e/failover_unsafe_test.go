//go:build sluice_unsafe

package e2e

import (
	"strings"
	"testing"
)

// TestNegativeFailoverNoSlotFailover is the negative control of
// TestFailoverSameSlot: with SLUICE_UNSAFE_NO_SLOT_FAILOVER=1 the slot is
// created without FAILOVER true, so the standby keeps no copy of it; after
// the same kill -9 and promotion the slot is gone on the new primary, the
// reader copies every table again (slot_lost), and the status says why.
// The repair is correct, only costly: the oracle still finds 0
// differences.
func TestNegativeFailoverNoSlotFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	s, src, _ := failoverRun(t, true, false, "SLUICE_UNSAFE_NO_SLOT_FAILOVER=1")
	if len(s.dev.P.Grep("SLUICE_UNSAFE_NO_SLOT_FAILOVER")) == 0 {
		t.Skip("sluice did not log SLUICE_UNSAFE_NO_SLOT_FAILOVER: the hook is not wired")
	}
	lost := s.dev.P.Grep("replication slot lost")
	if len(lost) == 0 {
		t.Fatalf("a slot without failover survived the promotion: the control does not bite\n%s", s.tail())
	}
	st := s.readerStatus(t)
	if st.SlotLost == nil || !strings.Contains(st.SlotLost.Why, "failover off") {
		t.Fatalf("the status does not say why the slot was lost: %+v", st.SlotLost)
	}
	t.Logf("without failover the promotion lost the slot and every table was copied again: %s", st.SlotLost.Why)
	if rows, diffs := oracle(t, src, s, "public.fo_events", []string{"tenant_id", "id"}); len(diffs) > 0 {
		t.Fatalf("after the re-copy, %d rows checked, %d differences:\n%s", rows, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
}
