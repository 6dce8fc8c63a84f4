//go:build !sluice_unsafe

package flusher

import (
	"log/slog"

	"github.com/sluice-cdc/sluice/services/flusher/internal/delivery"
)

// unsafeRules is every rule on: a build without the sluice_unsafe tag has no
// switch to turn one off.
func unsafeRules(*slog.Logger) rules { return rules{} }

// apply has nothing to switch off in a production build.
func (rules) apply(*delivery.Manager) {}
