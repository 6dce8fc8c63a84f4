//go:build sluice_unsafe

package catalog

import (
	"log/slog"
	"os"
)

// unsafeIgnoreClearsEnv, set to 1 in a sluice_unsafe build, makes reads
// ignore clears (the end-to-end negative control of docs/adr/0024): a
// truncated table's old rows read again. It logs one WARN line naming it.
const unsafeIgnoreClearsEnv = "SLUICE_UNSAFE_IGNORE_CLEARS"

func unsafeIgnoreClears(log *slog.Logger) bool {
	if os.Getenv(unsafeIgnoreClearsEnv) != "1" {
		return false
	}
	if log == nil {
		log = slog.Default()
	}
	log.Warn(unsafeIgnoreClearsEnv + "=1: reads ignore clears (TRUNCATE, the end of a resync) and show rows the source no longer has; for negative-control tests only")
	return true
}
