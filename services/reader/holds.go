package reader

import (
	"maps"
	"strings"
	"sync"

	"github.com/sluice-cdc/sluice/shared/state"
)

// Resync holds: rows that reach the destinations only by a resync, never by
// the stream — those a schema change rewrote without WAL (a column added with
// a default, renamed, dropped and added again: capture/schemachange.go) and
// those of a table added to source.tables, and the changes a publication
// that captured a subset of a table left out (publication.go). Until that
// resync is done and a
// snapshot is through its end, no snapshot holds them, whatever LSN it is
// through, so `sluice wait` waits for it (services/sluice cli
// recoveringAtOrBelow). The schema change's own position is not in the
// stream (pgoutput carries no DDL), so a hold counts for every LSN.
//
// The active reader keeps one hold per table (the latest such resync),
// rebuilt from the resync queue at start.

// ResyncHold is a table's hold, as the status shows it.
type ResyncHold struct {
	ResyncID int64  `json:"resync_id"`
	Reason   string `json:"reason"`
	// EndLSN is the end of the resync that settled it (it or a later
	// resync of the whole table): a snapshot through it holds its rows.
	// Empty while none is done.
	EndLSN string `json:"end_lsn,omitempty"`
	// Error is why the resync failed: the rows are in no snapshot until
	// a resync of the table (`sluice resync --table`) is done.
	Error string `json:"error,omitempty"`
}

// holdReason reports whether a resync of reason carries rows the stream
// does not.
func holdReason(reason string) bool {
	return strings.HasPrefix(reason, "schema_change") || reason == "added" || reason == ReasonPublication
}

type resyncHolds struct {
	mu sync.Mutex
	m  map[string]ResyncHold
}

// note records what one state of a resync request says about its table's
// hold: a request of a hold reason starts a new hold (the latest wins: an
// earlier one's copy may predate the later change); a resync of the whole
// table done at or after the hold's settles it; the hold's own resync
// failing leaves it unsettled, with the error. Requests are noted in id
// order (a table's resyncs run one at a time, in id order).
func (h *resyncHolds) note(r state.Resync) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]ResyncHold{}
	}
	cur, held := h.m[r.Table]
	full := r.Destination == "" && r.Value == nil
	switch {
	case holdReason(r.Reason) && (!held || r.ID >= cur.ResyncID):
		if !held || r.ID > cur.ResyncID {
			cur = ResyncHold{ResyncID: r.ID, Reason: r.Reason}
		}
	case !held || !full || r.ID < cur.ResyncID:
		return
	}
	switch {
	case r.State == state.ResyncDone && full:
		cur.EndLSN, cur.Error = r.EndLSN, ""
	case r.State == state.ResyncFailed && r.ID == cur.ResyncID:
		cur.Error = r.Error
	}
	h.m[r.Table] = cur
}

// load rebuilds the holds from the queue's requests (newest first, as
// state.Resyncs.List returns them) of the configured tables.
func (h *resyncHolds) load(list []state.Resync, tables map[string]bool) {
	for i := len(list) - 1; i >= 0; i-- {
		if tables[list[i].Table] {
			h.note(list[i])
		}
	}
}

func (h *resyncHolds) snapshot() map[string]ResyncHold {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.m) == 0 {
		return nil
	}
	return maps.Clone(h.m)
}
