package reader

import (
	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/capture"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
)

// Status is the reader's state for `sluice status` and /api/v1/status.
type Status struct {
	Slot         string                      `json:"slot"`
	State        string                      `json:"state"` // starting, standby, backfilling, streaming, restarting
	Holder       string                      `json:"holder"`
	LeaseTerm    int64                       `json:"lease_term,omitempty"`
	ConfirmedLSN string                      `json:"confirmed_lsn"`
	ServerLSN    string                      `json:"server_lsn"`
	LagBytes     uint64                      `json:"lag_bytes"`
	Rows         map[string]int64            `json:"rows"`
	Halted       map[string]string           `json:"halted_tables,omitempty"`
	Backfill     map[string]capture.Progress `json:"backfill,omitempty"`
	// Resyncs is the progress of the live resyncs this reader ran, by table.
	Resyncs map[string]capture.ResyncProgress `json:"resyncs,omitempty"`
	// ResyncCommand is, per halted table, the command that recovers it.
	ResyncCommand map[string]string `json:"resync_command,omitempty"`
	LastError     string            `json:"last_error,omitempty"`
	// SpillBytes are the in-progress transactions Postgres streamed
	// (source.protocol 2) held on local disk until their commit, in
	// StreamingTxns transactions (reader.spill_dir).
	SpillBytes    int64 `json:"spill_bytes,omitempty"`
	StreamingTxns int   `json:"streaming_transactions,omitempty"`

	// HaltedAt is, per halted table whose position is known, the commit
	// LSN of its first change not carried: every change of it at or after
	// that LSN is in no snapshot (sluice wait exits 2 for an LSN at or
	// above it). A table shown halted without one (dropped at the source)
	// has no known position.
	HaltedAt map[string]string `json:"halted_at_lsn,omitempty"`
	// RecoveredHalts are the latest halt of each table a resync cleared
	// (persisted in reader_recovered, so a restart keeps them): the changes
	// the halt dropped are in snapshots through the resync's end_lsn (sluice
	// wait waits for it).
	RecoveredHalts map[string]RecoveredHalt `json:"recovered_halts,omitempty"`
	// ResyncHolds are, per table, the latest resync that carries rows the
	// stream does not (a schema change's rewrite, a table added): `sluice
	// wait` waits until it is done and a snapshot is through its end
	// (holds.go).
	ResyncHolds map[string]ResyncHold `json:"resync_holds,omitempty"`
	// SchemaCheckedLSN: every schema change committed at or below it has
	// been looked for by the periodic schema check, and its resync is in
	// ResyncHolds; `sluice wait` for an LSN above it waits (a change that
	// no later row change brings to the stream is seen only there).
	SchemaCheckedLSN string `json:"schema_checked_lsn,omitempty"`
	// Failover is what the source can tell about whether a promoted
	// standby keeps the slot (failover.go; read every 10 s).
	Failover *source.Failover `json:"failover,omitempty"`
	// Standby is set when source.dsn reaches a hot standby (Postgres 16+):
	// the primary the reader writes to (host only) and the standby's replay
	// position and lag (standby.go; read every 10 s).
	Standby *StandbyStatus `json:"standby,omitempty"`
	// SlotLost is the last time this reader found the slot gone after its
	// backfill and copied every table again, and why.
	SlotLost *slotLostNote `json:"slot_lost,omitempty"`
}

// RecoveredHalt is a halt a resync cleared.
type RecoveredHalt struct {
	HaltedAt string `json:"halted_at_lsn"`
	EndLSN   string `json:"end_lsn"`
}

// Status reports the reader's state.
func (r *Reader) Status() Status {
	s := r.state.Snapshot()
	st := Status{Slot: r.cfg.Source.Slot, State: s.Phase, Holder: r.holder, ConfirmedLSN: s.Confirmed.String(),
		ServerLSN: s.Server.String(), Rows: s.Rows, Halted: s.Halted, Backfill: s.Backfill, Resyncs: s.Resyncs, LastError: s.LastError,
		SpillBytes: s.SpillBytes, StreamingTxns: s.StreamingTxns,
		ResyncHolds: r.holds.snapshot(), Failover: r.failover.Load(), SlotLost: r.slotLost.Load(), Standby: r.replay.Load()}
	if lsn := r.schemaChecked.Load(); lsn > 0 {
		st.SchemaCheckedLSN = proto.LSN(lsn).String()
	}
	for t, rh := range s.Recovered {
		if st.RecoveredHalts == nil {
			st.RecoveredHalts = map[string]RecoveredHalt{}
		}
		st.RecoveredHalts[t] = RecoveredHalt{HaltedAt: rh.HaltedAt.String(), EndLSN: rh.End.String()}
	}
	for t := range s.Halted {
		if st.ResyncCommand == nil {
			st.ResyncCommand = map[string]string{}
		}
		st.ResyncCommand[t] = "sluice resync --table " + t
	}
	for t, at := range s.HaltedAt {
		if _, ok := s.Halted[t]; ok {
			if st.HaltedAt == nil {
				st.HaltedAt = map[string]string{}
			}
			st.HaltedAt[t] = at.String()
		}
	}
	if s.Server > s.Confirmed {
		st.LagBytes = uint64(s.Server - s.Confirmed)
	}
	r.mu.Lock()
	if r.held {
		st.LeaseTerm = r.lease.Term
	}
	r.mu.Unlock()
	return st
}
