// Package capture owns the reader's data path: the logical replication
// session (START_REPLICATION with pgoutput, protocol 2 by default from
// Postgres 14 on, else 1), turning changes into Arrow
// batches per table, the snapshot backfill of a new slot, the ordered
// publish pipeline to JetStream, and the prefix-complete LSN it confirms to
// Postgres.
//
// Batching. Rows of consecutive transactions are grouped, one builder per
// table. Inside a transaction a table's batch is cut only by rows and bytes
// (reader.batch_rows, reader.batch_bytes). A group closes at a commit when
// it holds batch_rows or batch_bytes, at the Begin of a transaction whose
// commit time (from the WAL) is batch_interval past the group's first
// commit, or, when the stream is idle, by the wall clock once the group's
// first commit is 2 x batch_interval old and nothing arrived for
// batch_interval/8. Every confirmed LSN is a group boundary where all
// builders were empty, and every close rule but the idle one is a function
// of the WAL, so a session restarted from the confirmed LSN re-cuts the same
// batches and republishes the same Nats-Msg-Ids (JetStream drops them); the
// idle rule is built to agree with the Begin rule on replay (the next
// transaction commits after the close, so past the group's span) unless the
// two clocks disagree by more than batch_interval — then duplicates carry
// other ids, which apply (by position) ignores.
//
// Streamed transactions (protocol 2). A transaction Postgres streams before
// its commit is spilled to local disk and replayed at its Stream Commit as
// protocol 1 would have sent it (spill.go), so the rules above see no
// difference: the replay's batches are cut by the same rules at the same
// positions.
//
// Through. A batch cut inside a group carries the previous group boundary as
// Sluice-Through; the last batch of a group carries the commit end LSN that
// closed it. With nothing buffered or in flight the session publishes a tick
// on sluice.changes._tick at the server's position from keepalives, once
// that position stood for max(2 x status_interval, 500ms) with no
// transaction open (a keepalive reports how far the walsender has read; a
// commit record straddling that point is flushed with its commit and
// decoded within milliseconds).
//
// Ordering. Every message carries Nats-Expected-Last-Sequence: the stream
// sequence the message published before it is stored at (the reader is
// CHANGES' only publisher, so each stored message takes the next one), so a
// rejected publish can never be overtaken by a later one in the stream;
// any publish failure ends the session and the reader restarts from the
// confirmed LSN. After a (re)start the pipeline publishes one message at a
// time, unchained, until the broker stores one that is not a duplicate (its
// ack's sequence starts the chain), and only then pipelines (the replayed
// prefix is deduplicated by id). The chain is on the sequence, not on the
// previous message's id (Nats-Expected-Last-Msg-Id): a replicated stream's
// leader checks the expected sequence before it proposes the message, but
// nats-server v2.15.3 checks the expected id again on every replica as it
// applies the entry, and a mismatch there (a chained publish lost in a
// leader change) is a write error on every node that leaves the stream
// without a leader (test/kit TestNATSLastMsgIDMismatchWedgesStream).
//
// Files: stream.go is the session and its receive loop, handle.go the
// dispatch of pgoutput messages, spill.go streamed transactions, relation.go relation messages (schema
// changes), halt.go halting a table, idle.go idle settling and ticks,
// group.go batching, apply.go and generated.go unchanged-TOAST and
// generated-column reads, pipeline.go and publish.go the publish pipeline.
//
// capture must never confirm an LSN before every message at or below it is
// acked by JetStream, and never confirm what was merely received.
package capture
