package stack

import (
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/shared/config"
)

// Spec is how one service is assembled: what its process opens and how the
// service is built on the open stack. Each service declares its one Spec
// (services/<name>/component.go); the service's binary (Main) and
// `sluice run`/`sluice dev` (services/sluice/internal/cli) both assemble
// from it, so the two cannot drift.
type Spec struct {
	Name  string
	Needs Needs
	// Build constructs the component. own is what the service gets for
	// itself: a process hosting several services gives each its own NATS
	// connection and logger.
	Build func(cfg config.Config, st *Stack, own Own) (Component, error)
	// Alone, if set, runs before Build when the service has its process to
	// itself (its binary, or `sluice run <name>`), for process-wide
	// settings such as the flusher's memory limit.
	Alone func(cfg config.Config, log *slog.Logger)
}

// Own is what a service gets of its own in a process.
type Own struct {
	JS  jetstream.JetStream
	Log *slog.Logger
}

// NeedsOf is what a process hosting the given services opens: the union of
// their needs.
func NeedsOf(specs ...Spec) Needs {
	var n Needs
	for _, s := range specs {
		n.State = n.State || s.Needs.State
		n.Catalog = n.Catalog || s.Needs.Catalog
		n.Packs = n.Packs || s.Needs.Packs
		n.EmbeddedNATS = n.EmbeddedNATS || s.Needs.EmbeddedNATS
	}
	return n
}
