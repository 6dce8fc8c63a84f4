// Package core is the flusher's per-partition delivery protocol as a
// deterministic state machine: the I/O shell (package delivery) feeds it
// events — a message received, a flush started, packs durable, a cursor
// written or refused, pack events published, the lease check before the
// ack, a flush failed, the lease lost, a claim, the consumer's ack-pending
// count — and it answers with what to do: buffer, nak, ack, drop, which
// step of a flush comes next, which cursor to write, which messages to ack
// or nak. The model checker (package model) drives the same code through
// every interleaving of small configurations.
//
// It must never do I/O: no goroutines, clocks, network, SQL, randomness or
// logging. It is not safe for concurrent use; the shell serializes every
// call of one partition (delivery.Manager.mu).
//
// A ROUTED message is a partition message: one slice per destination it
// carries rows of (Msg.Slices), each received by its destination's Dest
// and buffered, flushed, failed and committed there as a per-destination
// message was. The partition tracks each message's slices (message.go):
// it is acked only once every slice is committed or retired (Resolved.Ack
// from the Commit of its last slice), nak'd once when its last open slice
// is resolved and one slice was nak'd (halted, raced a failure, past the
// deadline, held surplus, failed flush); Tracked and Settle count
// distinct messages. Idle destinations can be forgotten (Forget) and
// their persisted cursors loaded again (Load).
//
// The rules it holds (INVARIANTS.md rules 1, 3 and 4):
//   - a message is acked only when every one of its destination slices is
//     in a durable pack whose cursor step and pack event are done;
//   - the cursor is prefix-complete: the highest position in a durable
//     pack, capped just below the first position still pending (buffered,
//     in flight in another flush, or nak'd awaiting redelivery);
//   - a claimed partition advances no cursor until it is settled: its
//     consumer's ack-pending count is no more than the messages it tracks,
//     counted only once a fetch wait has passed since the claim (Drained);
//   - past its local lease deadline (Expire, until Renewed) a partition
//     starts no fetch (MayFetch) and buffers nothing (NakExpired: nak'd,
//     kept pending);
//   - a flush's steps run in order: packs durable, cursor, pack events,
//     then the ack, which is fenced by the lease the flush started under;
//   - a failed flush discards its in-flight and live buffers (nak'd, still
//     pending until redelivered) and bumps the read epoch, so a fetch that
//     raced the failure is discarded;
//   - a lost partition changes nothing: it acks nothing and advances no
//     cursor.
//
// Mutant switches each turn one rule off; they are set only by the model
// checker and the shell's negative-control tests.
package core
