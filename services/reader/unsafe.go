//go:build sluice_unsafe

package reader

import (
	"log/slog"
	"os"
)

// The switches of the end-to-end negative controls (test/e2e), read only in
// a build with the sluice_unsafe tag. Each logs one WARN line naming its
// variable: the tests check for it to know the hook is live.
const (
	// unsafeNoAutoResyncEnv, set to 1, switches the auto-resync on schema
	// changes without WAL off.
	unsafeNoAutoResyncEnv = "SLUICE_UNSAFE_NO_AUTO_RESYNC"
	// unsafeScalarMaxEnv, set to 1, switches the prefix-complete confirmed
	// LSN off (confirm max(acked) instead).
	unsafeScalarMaxEnv = "SLUICE_UNSAFE_SCALAR_MAX_LSN"
	// unsafeUnchainedEnv, set to 1, switches the publish chain off: with
	// the chain, a publish after a lost one fails too, so acks resolve in
	// order and scalar-max confirms no more than the prefix; the control
	// of rule 2 switches both off.
	unsafeUnchainedEnv = "SLUICE_UNSAFE_UNCHAINED"
	// unsafeNoHighWatermarkEnv, set to 1, switches a live resync's
	// high-watermark check off: a chunk's rows that the stream changed
	// inside its window are published anyway (stale over newer).
	unsafeNoHighWatermarkEnv = "SLUICE_UNSAFE_NO_HIGH_WATERMARK"
	// unsafeNoKnownKindsEnv, set to 1, compares column kinds only with the
	// session's previous Relation message, not with the kinds the stream
	// carried before (capture/kinds.go).
	unsafeNoKnownKindsEnv = "SLUICE_UNSAFE_NO_KNOWN_KINDS"
	// unsafeNoSlotFailoverEnv, set to 1, creates the slot without
	// FAILOVER true (Postgres 17+) and never alters it.
	unsafeNoSlotFailoverEnv = "SLUICE_UNSAFE_NO_SLOT_FAILOVER"
	// unsafeReplayAbortedEnv, set to 1, replays the changes of a streamed
	// transaction's aborted subtransactions at its commit (capture/spill.go).
	unsafeReplayAbortedEnv = "SLUICE_UNSAFE_REPLAY_ABORTED"
	// unsafeNoReplayWaitEnv, set to 1, reads a resync chunk on a standby
	// source without waiting for the standby to replay its low watermark
	// (standby.go).
	unsafeNoReplayWaitEnv = "SLUICE_UNSAFE_NO_REPLAY_WAIT"
)

// unsafeRules reads the switches.
func unsafeRules(log *slog.Logger) rules {
	var r rules
	if os.Getenv(unsafeScalarMaxEnv) == "1" {
		r.scalarMax = true
		log.Warn(unsafeScalarMaxEnv + "=1: the reader confirms max(acked) instead of the prefix-complete LSN and WILL lose changes; for negative-control tests only")
	}
	if os.Getenv(unsafeUnchainedEnv) == "1" {
		r.unchained = true
		log.Warn(unsafeUnchainedEnv + "=1: the reader publishes without the Nats-Expected-Last-Sequence chain; for negative-control tests only")
	}
	if os.Getenv(unsafeNoHighWatermarkEnv) == "1" {
		r.noHighWatermark = true
		log.Warn(unsafeNoHighWatermarkEnv + "=1: a live resync publishes the rows the stream changed inside a chunk's window and WILL read stale rows; for negative-control tests only")
	}
	if os.Getenv(unsafeNoAutoResyncEnv) == "1" {
		r.noAutoResync = true
		log.Warn(unsafeNoAutoResyncEnv + "=1: the reader does not resync a table whose schema change rewrote its rows without WAL, and older rows WILL read stale; for negative-control tests only")
	}
	if os.Getenv(unsafeNoKnownKindsEnv) == "1" {
		r.noKnownKinds = true
		log.Warn(unsafeNoKnownKindsEnv + "=1: a column type changed before a table's first change in a session is not caught, and the table's older rows WILL vanish from reads; for negative-control tests only")
	}
	if os.Getenv(unsafeNoSlotFailoverEnv) == "1" {
		r.noSlotFailover = true
		log.Warn(unsafeNoSlotFailoverEnv + "=1: the replication slot is created without failover, and a promoted standby WILL not have it (every table is copied again); for negative-control tests only")
	}
	if os.Getenv(unsafeReplayAbortedEnv) == "1" {
		r.replayAborted = true
		log.Warn(unsafeReplayAbortedEnv + "=1: the changes of a streamed transaction's rolled-back savepoints WILL be published; for negative-control tests only")
	}
	if os.Getenv(unsafeNoReplayWaitEnv) == "1" {
		r.noReplayWait = true
		log.Warn(unsafeNoReplayWaitEnv + "=1: a live resync on a standby source reads its chunks before the standby replayed their low watermark and MAY publish stale rows; for negative-control tests only")
	}
	return r
}
