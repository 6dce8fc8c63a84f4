// Package capture owns the reader's data path: the logical replication
// session (START_REPLICATION with pgoutput v1), turning changes into Arrow
// batches per table, the snapshot backfill of a new slot, the ordered
// publish pipeline to JetStream, and the prefix-complete LSN it confirms to
// Postgres.
//
// Batching. Rows of consecutive transactions are grouped per table. Inside a
// transaction a table's batch is cut only by rows and bytes; a group closes
// at a commit (by group rows/bytes, or when the commit time is batch_interval
// past the group's first commit) or, idle, by the wall clock. Every confirmed
// LSN is a group boundary where all batches were empty, so a session
// restarted from it re-cuts the same batches and republishes the same
// Nats-Msg-Ids (except after an idle wall-clock close, where a replay may
// group differently: duplicates then carry other ids and apply, being by
// position, ignores them).
//
// Ordering. Every message carries Nats-Expected-Last-Msg-Id of the one
// published before it, so a rejected publish can never be overtaken by a
// later one in the stream; any publish failure ends the session and the
// reader restarts from the confirmed LSN. After a (re)start the pipeline
// publishes one message at a time, unchained, until the broker stores one
// that is not a duplicate, and only then pipelines (the replayed prefix is
// deduplicated by id).
//
// capture must never confirm an LSN before every message at or below it is
// acked by JetStream, and never confirm what was merely received.
package capture
