//go:build !sluice_unsafe

package catalog

import "log/slog"

// unsafeIgnoreClears is false outside a sluice_unsafe build (unsafe.go).
func unsafeIgnoreClears(*slog.Logger) bool { return false }
