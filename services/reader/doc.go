// Package reader is the reader service: one active capture of the source
// Postgres per replication slot (standbys wait on the lease
// "reader/<slot>"), publishing every committed change of the configured
// tables to the CHANGES stream as Arrow batches, and confirming to Postgres
// only the prefix-complete LSN that JetStream has stored.
//
// It owns: start-up validation of the source (internal/source), the
// replication session, batching, backfill and publish pipeline
// (internal/capture), the pgoutput decoder (internal/pgoutput), the
// confirmed-LSN tracker (internal/confirm), the Arrow batch shape
// (internal/batch), and two small tables in the state schema:
// <schema>.reader_backfill (one row per slot: running/done, so a reader
// that died mid-backfill copies again) and
// <schema>.reader_halted (tables halted by TRUNCATE or a column type
// change; delete the row after resyncing to resume the table).
//
// The reader must never confirm an LSN that is not durably in JetStream,
// never publish for a table it has halted, and never keep streaming once it
// lost its lease.
//
// NOTES
//   - TRUNCATE is a clear (proto.OpClear) at its position, for every
//     destination (docs/adr/0024-clear.md), not a halt.
//   - A column whose kind differs from the kind the stream carried for it
//     (capture/kinds.go; kept in reader_kinds across restarts) halts its
//     table; other tables keep flowing, sluice_reader_table_halted and
//     Status say why, the halt is persisted so a restart does not silently
//     resume, and a resync of the table recovers it (the catalog's next
//     table generation, docs/adr/0028-table-generations.md). Added,
//     dropped or same-kind retyped columns switch the table to a new schema
//     (new Sluice-Schema fingerprint) after flushing the current batch.
//   - Backfill: the slot is created with EXPORT_SNAPSHOT; tables are copied
//     in that snapshot and published as OpInsert at (consistent point - 1,
//     copy ordinal per table: below the first streamed commit, which can
//     start at the consistent point itself; Snapshot.LSN) before streaming
//     starts at the consistent point.
//     A crash mid-backfill: the reader_backfill row still says running, so
//     the next start copies again, keeping the slot (which streams every
//     change after its own consistent point, deletes of rows the unfinished
//     copy published included) and reading the exact snapshot of a
//     temporary slot whose later consistent point the new copy's rows take
//     as LSN. Re-published rows are harmless: apply is by position.
//   - Known gaps: the replica identity key is read at start (a primary key
//     changed while running needs a restart); a single row larger than
//     nats.max_payload halts its table (too_large); a table halted for a
//     bad value or size is not auto-resumed (delete its reader_halted row);
//     keepalive positions are confirmed after a settle delay, a heuristic
//     for a commit record still in decoding at the reported position.
//   - The end-to-end negative controls switch safety rules off (rules.go)
//     through environment switches that only a build with the
//     sluice_unsafe tag reads (unsafe.go; each logged as a WARN).
package reader
