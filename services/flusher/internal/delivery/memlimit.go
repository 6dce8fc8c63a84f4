package delivery

import (
	"math"
	"runtime/debug"

	"github.com/sluice-cdc/sluice/shared/config"
)

// FixedOverhead is what a flusher process needs beyond its buffers
// (delivery.memory_budget, which counts every buffered message with its
// per-message overhead): the Go runtime, connections and clients, the
// per-destination state, and the flushes being encoded and written.
const FixedOverhead = 96 << 20

// SetMemoryLimit sets the Go runtime's soft memory limit to
// memory_budget + FixedOverhead, so garbage does not double the heap past
// the budget (GOGC's headroom), unless a limit is already set (GOMEMLIMIT).
// It returns the limit in force. It is process-wide: the flusher's own
// binary calls it; a process hosting several services should not.
func SetMemoryLimit(dc config.Delivery) int64 {
	if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 {
		return cur
	}
	lim := int64(dc.MemoryBudget) + FixedOverhead
	debug.SetMemoryLimit(lim)
	return lim
}
