// Package indexer is the indexer service: it reads every pack announced on
// PACKS (and, as a completeness check, every pack in the pack store), checks
// its footer against its event and path, inserts its rows into the catalog
// and records it in the pack inventory — inventory last, ack after. A
// segment (a pack of every destination of one group commit and table) has
// one event on proto.SegmentEventSubject(table) with one row per
// destination, is indexed by one statement and recorded by one inventory
// row per destination, all in one insert, before its event is acked. Any
// number of replicas share the durable consumer proto.ConsumerIndexer;
// indexing is idempotent by pack identity.
//
// The indexer must never index a pack whose footer names another
// destination (a segment: other destinations, or in another order), table
// or id than its event or its path (tenant isolation:
// such a pack is dead-lettered), never ack an event before the pack's
// inventory row is written, and never block other packs on a bad one.
//
// NOTES
//   - Every pack is verified whole (catalog.ReadRef, packstore.VerifyPack)
//     before the staging writer or the engine reads its rows; a corrupt one
//     is dead-lettered with its path and reason. A panic while indexing is a
//     permanent error for its pack. Every indexing statement is bounded by
//     indexer.max_memory and indexer.max_statement_time.
//   - Events are gathered for up to indexer.batch_wait (from when the first
//     was queued: one that waited behind a slow batch does not wait again)
//     or indexer.batch_rows rows, then indexed together: one INSERT ... SELECT per (table, schema)
//     over a UNION ALL of the packs' files. A failed batch is retried pack by
//     pack, so one bad pack cannot hold the others back.
//   - The reconciler lists the pack store every indexer.reconcile_interval
//     (and at start) and indexes packs missing from the inventory: events
//     are hints, the scan is completeness. The listing is incremental: the
//     per-destination layout at the first pass, then the segments from the
//     hour before the newest segment the previous pass listed. Its dead letters are the pack
//     events the flusher would have sent, with a message id from the store
//     and path. It also removes the stale temporary files of killed writes
//     (DirStore.CleanTemp) at start and every 10 minutes.
package indexer
