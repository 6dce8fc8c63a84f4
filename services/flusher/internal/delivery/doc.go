// Package delivery is the flusher's engine: it owns ROUTED partitions
// through fenced Postgres leases, splits each partition message into its
// destinations' slices (receive.go parse), buffers every destination's
// slices in memory, flushes them on a worker pool as immutable packs, advances each
// destination's prefix-complete cursor under the partition lease, publishes
// pack events and only then acks its input.
//
// It must never ack a message before the pack holding it is durable, never
// write a cursor past a change that is not in a pack (received or nak'd and
// awaiting redelivery), never act on a partition after losing its lease,
// and never let one destination's bad input stop another destination.
//
// Every decision of that protocol (buffer or nak, which cursor, the order
// of a flush's steps, the ack fence, the failure rule, settling) is made
// by package core, which delivery drives as its I/O shell: it performs
// what the core answers and feeds the results back (ARCHITECTURE.md "The
// core and the shell"). The unexported test knobs below map to
// core.Mutant switches.
//
// Lock order: Manager.mu is the only mutex guarding destination and
// partition state; no other lock is taken while holding it, and no I/O is
// done under it except non-blocking acks/naks.
//
// NOTES
//   - Group commit (group.go, segment.go): workers only resolve; one
//     committer takes every resolved flush waiting (up to commitBatchMax)
//     and runs the steps of a flush once for the group, in the same
//     order: one segment per (table, schema) holding every flush's rows of
//     it (up to the PACKS event's budget), encoded in parallel across
//     tables and written with shared fsyncs
//     (packstore.BatchPutter), cursors advanced in one fenced monotonic
//     statement (state.Cursors.AdvanceMany), one PACKS event per segment
//     published async with every PubAck awaited, the leases of the group
//     checked in one query right before the acks. A flush whose batched
//     step fails takes the one-at-a-time step (runFlush's, with its
//     retries; a failed segment: its rows written in segments of its
//     destination alone), so the failure rule is unchanged and one
//     destination's fault fails no other. The unexported knob
//     noGroupCommit runs every flush alone (BenchmarkFanoutNoGroupCommit).
//   - Memory: each buffered message counts msgOverhead + colOverhead per
//     column beyond its bytes (measured, see receive.go); SetMemoryLimit
//     caps the Go heap at memory_budget + FixedOverhead (96 MiB). A fetch
//     asks for at most its partition's share of the room left below the
//     watermark.
//   - Fetches use natsx.Fetch (FetchMaxWait), never a FetchContext: nats.go
//     drops the messages already sent to a fetch whose context ends, and
//     they stay ack-pending until AckWait (this stalled 10,000-destination
//     runs). A message that cannot be parsed is settled by natsx.Settler,
//     the classifier every stage shares.
//   - Partition messages: a message on proto.RoutedPartitionSubject holds
//     the rows of many destinations, grouped by proto.ColDestination; each
//     run becomes a slice read in place (rows [lo, hi) of the decoded
//     batch, item.src; no arrays of its own) without that column (what a
//     per-destination message carried), buffered in its destination. The
//     core acks the message once every slice is committed (or retired) and
//     naks it once if one slice was nak'd; the shell acks or naks the
//     shared jetstream.Msg once (resolveLocked). Per-destination messages
//     left from before (proto.RoutedSubject) are read as one slice.
//   - Bounded state (idle.go): destinations idle for delivery.idle_evict
//     leave memory; their cursors reload, one statement per fetched group,
//     when they reappear (none are loaded at the claim).
//   - Pending set: every received, not-yet-acked slice is tracked per
//     destination by stream sequence and position range. A failed flush naks
//     its messages but keeps their ranges pending (marked nak'd) until the
//     redelivery of the same stream sequence replaces them, so the cursor
//     cannot pass them while they are away (JetStream redelivers a message,
//     it does not re-read from the cursor as Viaduck did).
//   - Settling (ownership.go settle): a claimed partition advances no
//     cursor until its consumer's ack-pending count is no more than the
//     messages this owner tracks, so a dead previous owner's unacked
//     messages (invisible until AckWait) cannot be passed; flushes and
//     acks go on meanwhile. The unexported knob noSettle seeds at claim
//     (TestTakeoverSettleNegativeControl). It counts only a fetch wait
//     after the claim (Drained), when a previous owner's fetch delivers
//     nothing more.
//   - Fetch deadline (ownership.go checkDeadlineLocked): a partition
//     starts no fetch, and buffers nothing a fetch delivers (nak'd, kept
//     pending), once its local lease deadline passed unrenewed: the start
//     of its last successful renewal plus TTL less TTL/4, on the monotonic
//     clock (ARCHITECTURE.md "The fetch deadline").
//   - Epochs: a fetch records the failure generation before it starts; a
//     message fetched before a failure of its destination and buffered after
//     it is discarded (nak'd), the Viaduck read-epoch rule.
//   - Lifecycle (lifecycle.go): paused and drained destinations are
//     buffered, never flushed, their surplus nak'd but kept pending;
//     draining ones flush at once and are then marked drained; retired ones
//     flush once, then their slices are done at once (discarded, never
//     pending), the message acked once its other slices are committed.
//   - The brief's "drop a redelivered message at or below the cursor" is
//     available only as the unexported knob dropRedelivered (off): with
//     several router replicas publishing out of order and a takeover, a
//     redelivered message below the cursor may never have been in a pack
//     (X delivered to a dying owner, Y published later with a lower
//     position by another router is flushed by the new owner, then X
//     redelivers below the cursor and would be dropped). Re-flushing
//     it is harmless: apply is idempotent by position.
package delivery
