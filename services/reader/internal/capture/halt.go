package capture

import (
	"context"
	"fmt"

	"github.com/sluice-cdc/sluice/proto"
)

// halt stops publishing a table's changes: persisted, counted, shown.
func (s *session) halt(ctx context.Context, t *tableState, reason string, cause error) error {
	name := t.info.Name
	s.o.Log.Error("table halted: its changes are no longer published; resync it", "table", name, "reason", reason, "error", cause)
	// The first change not carried: the halting one, or the oldest of the
	// table's batch, which is dropped with it.
	at := proto.LSN(s.txLSN)
	if t.b != nil && t.b.Rows() > 0 {
		at = min(at, t.b.First().LSN)
	}
	if err := s.o.Halt(ctx, name, cause.Error(), at); err != nil {
		return fmt.Errorf("recording halt of %s: %w", name, err)
	}
	t.halted = true
	if t.b != nil {
		s.groupRows -= t.b.Rows()
		s.groupBytes -= t.b.Bytes()
	}
	t.release()
	s.o.Metrics.Halted.WithLabelValues(name, reason).Set(1)
	s.o.State.SetHaltedAt(name, at)
	s.o.State.SetHalted(name, cause.Error())
	return nil
}
