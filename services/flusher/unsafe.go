//go:build sluice_unsafe

package flusher

import (
	"log/slog"
	"os"

	"github.com/sluice-cdc/sluice/services/flusher/internal/delivery"
)

// The switches of the end-to-end negative controls (test/e2e), read only in
// a build with the sluice_unsafe tag. The WARN line naming the first is how
// the tests know the hook is live.
const (
	// unsafeScalarMaxCursorEnv, set to 1, switches the prefix-complete
	// cursor off (rules.scalarMaxCursor).
	unsafeScalarMaxCursorEnv = "SLUICE_UNSAFE_SCALAR_MAX_CURSOR"
	// unsafeDropRedeliveredEnv, set to 1 beside it, switches off reading
	// redelivered messages below the cursor (rules.dropRedelivered).
	unsafeDropRedeliveredEnv = "SLUICE_UNSAFE_DROP_REDELIVERED"
)

// unsafeRules reads the switches.
func unsafeRules(log *slog.Logger) rules {
	var r rules
	if os.Getenv(unsafeScalarMaxCursorEnv) == "1" {
		r.scalarMaxCursor = true
		r.dropRedelivered = os.Getenv(unsafeDropRedeliveredEnv) == "1"
		log.Warn(unsafeScalarMaxCursorEnv+"=1: the flusher's cursor is max(flushed), not prefix-complete, and WILL lose changes; for negative-control tests only",
			unsafeDropRedeliveredEnv, r.dropRedelivered)
	}
	return r
}

// apply switches the rules r turns off off in mgr.
func (r rules) apply(mgr *delivery.Manager) {
	if r != (rules{}) {
		mgr.Unsafe(r.scalarMaxCursor, r.dropRedelivered)
	}
}
