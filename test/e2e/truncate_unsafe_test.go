//go:build sluice_unsafe

package e2e

import (
	"testing"
)

// TestNegativeIgnoreClears is the negative control of TestTruncateMidStream:
// with SLUICE_UNSAFE_IGNORE_CLEARS=1 the catalog reads as if no clear
// existed, and the oracle must find the rows the truncates removed.
func TestNegativeIgnoreClears(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	rep, s := truncateRun(t, "SLUICE_UNSAFE_IGNORE_CLEARS=1")
	if len(s.dev.P.Grep("SLUICE_UNSAFE_IGNORE_CLEARS")) == 0 {
		t.Skip("sluice did not log SLUICE_UNSAFE_IGNORE_CLEARS: the hook is not wired")
	}
	if rep.OK() {
		t.Fatalf("reads that ignore clears passed the oracle: the control does not bite (%s)", rep)
	}
	t.Logf("with clears ignored the oracle finds %d phantom rows (as it must): %s", rep.Phantom, rep)
}
