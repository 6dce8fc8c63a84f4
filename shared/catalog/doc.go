// Package catalog owns sluice's ClickHouse catalog: the connection port
// (Conn, with an embedded chDB backend and a ClickHouse server backend), the
// schema and its version stamp, indexing packs into per-table rows tables,
// publishing fenced snapshots, and pinned reads.
//
// The catalog is a projection of the pack store. Packs are the only source
// of truth; everything here can be dropped and rebuilt from them (Rebuild).
// So the catalog never migrates itself in place: a catalog whose schema
// stamp this build does not read, or that is damaged in a way it can
// recognise, is refused before any DDL with a message naming what was found
// and the rebuild procedure.
//
// What the catalog must never do:
//   - collapse two rows that disagree: pack identity (store_id, pack_id) and
//     the change's position are in every rows table's sort key, so a merge
//     only ever folds a pack's row onto an identical copy of itself;
//   - make a snapshot visible without the live publisher lease: the
//     watermark row that admits a snapshot is written by one INSERT ...
//     SELECT whose single WHERE subquery checks, on the server's clock, that
//     the caller's lease is the live head and that the version is above
//     every published one;
//   - change a published snapshot: membership is the set of manifest rows
//     paired by (version, publish_id) with a watermark row, and a version can
//     only be published above the current head;
//   - record a pack in the inventory before its rows are durable: the
//     inventory row is written last, so a crash re-indexes rather than
//     skips.
//
// Objects (prefix p, default "sluice"):
//
//	p_schema_version     the stamp, written LAST by EnsureSchema
//	p_tables             registry: per table and schema fingerprint, columns (kind, pg type), primary key
//	p_packs              pack inventory, one row per indexed (store_id, pack_id)
//	p_manifest           snapshot membership rows (version, publish_id, store_id, pack_id)
//	p_watermark          one row per published snapshot (version, publish_id, through_lsn, ...)
//	p_publisher_lease    append-only publisher lease (term, lease_id, holder, expiry) and the
//	                     sole-claimant version claims (version, claim_id) a publish's renewal
//	                     carries; in memory, its newest rows only (schema version 2)
//	p_snapshots          view: published snapshots with their cumulative pack count
//	p_rows.<schema.table>    per captured table: the rows of every destination
//	p_latest.<schema.table>  view: that table as of the latest published snapshot
//
// NOTES
//   - The rows tables' ORDER BY is (destination, primary key..., store_id,
//     pack_id, _sluice_lsn, _sluice_seq): pack identity as the brief asks,
//     plus the position, because one pack may hold several versions of one
//     key (an insert then a TOAST-unchanged update in one flush) and a merge
//     must not fold those onto each other.
//   - Times are stored as Int64 microseconds and dates as Int32 days. Packs
//     are read with an explicit structure: timestamps as DateTime64(6) then
//     toUnixTimestamp64Micro (lossless for every Int64, verified for year 1
//     and 9999), dates straight as Int32 (reading them as Date32 refuses
//     days outside 1900..2299).
//   - ClickHouse reads a NULL Arrow list as an empty array; packs carry
//     _sluice_nulls (the array columns that are NULL in the row, added by
//     the pack writer only when needed), stored per row and resolved like a
//     value (TOAST carry-forward included), so reads render null vs [].
//     Packs with and without the marker column are inserted apart (one
//     INSERT reads every file with one structure). The latest views show []
//     for NULL arrays.
//   - Performance (chDB, one statement at a time per process; on a loaded
//     2-core machine every statement costs milliseconds of fixed overhead,
//     each scalar or IN subquery about one more, and query analysis grows
//     with expression count):
//   - Publish is four statements: renewal-and-claim (one row appended to
//     the lease table, fenced on the head it reads once), manifest,
//     watermark, one UNION ALL read-back (the version's publishes, the lease
//     head, the server clock, the highest versions). Every publish renews
//     the lease, at no extra statement: the renewal row is the version
//     claim. The sole-claim check and the version barrier run inside the
//     fence subquery; the next version comes from the last read-back.
//   - Measured costs on this machine (chDB 26.5, see BenchmarkPublishHistory
//     -v): a MergeTree INSERT creates about ten files for its part (about
//     2-4 ms here, whatever the rows), every table read in a subquery costs
//     about 1-1.5 ms, a trivial SELECT 1 about 0.6 ms. So the lease and the
//     claims, rewritten on every publish and only ever read for their newest
//     rows, live in one in-memory table bounded to its newest rows (an
//     in-memory table keeps each insert as a block that every read walks);
//     manifest and watermark stay MergeTree (durable: pinned snapshots).
//   - The publish window: a publish (and Pending) reads only inventory rows
//     stamped after the last publish minus 30 s, against the memberships
//     of snapshots published after it minus 60 s, so its cost follows
//     recent packs, not the history (a full anti-join measured 6.5 ms at
//     5,000 packs, 27 ms at 50,000, 181 ms at 200,000). A full sweep runs
//     on a handle's first publish and every 5 minutes, so a pack whose
//     inventory row became visible long after its stamp is late, not lost
//     (TestStalledIndexerPackIsPublished).
//   - Rows INSERTs run with max_insert_threads = 2 and optimize_on_insert =
//     0 (rows equal on the whole sort key are copies of one change).
//   - A page read is two statements: the page's keys (LIMIT 1 BY, in key
//     order), then the resolution over that key range. The resolution
//     aggregates in an inner query and picks columns in an outer one, so
//     the winning tuple is not re-expanded at every reference (that
//     expansion made planning most of the read). Published versions and
//     small memberships (up to 2,000 packs per destination and table) are
//     cached: a published snapshot never changes.
//   - Table names: p_rows.<schema>.<table> is quoted with backquotes; the
//     dot is the one separator that cannot occur inside either identifier.
package catalog
