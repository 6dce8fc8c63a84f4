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
//   - change a published snapshot: its members are the inventory rows at
//     or below the high-water its watermark row records, minus the removals
//     of the rows at or below it, written by one INSERT of one row (one
//     part) or not at all; a version can only be published above the
//     current head, and the inventory keeps every row's first copy at its
//     block (a plain MergeTree), so no merge moves a member;
//   - record a pack in the inventory before its rows are durable: the
//     inventory row is written last, so a crash re-indexes rather than
//     skips;
//   - publish a snapshot that leaves out an inventory row its statement
//     sees: the through_lsn a publish claims is proven by the frontier
//     through committed inventory rows, so every one of them must be in
//     it (admission by block number, not by clock; see NOTES);
//   - reuse a version number, even across a rebuild (the version floor);
//   - serve a fresh read of an expired snapshot, or lower the expiry
//     horizon (retention.go); only garbage collection (gc.go) deletes, and
//     only members removed below the GC horizon and every pin;
//   - publish a compaction (compact.go) whose snapshot reads differently
//     from the one it replaces: it keeps each key's winner and TOAST
//     carry-forward candidates verbatim (ADR 0023).
//
// Objects (prefix p, default "sluice"):
//
//	p_schema_version     the stamp, written LAST by EnsureSchema
//	p_tables             registry: per table and schema fingerprint, columns (kind, pg type), primary key, generation
//	p_packs              pack inventory, one row per indexed (store_id, pack_id, destination):
//	                     one per pack, one per destination a segment holds, with
//	                     persisted block numbers; a plain MergeTree (a copy of a row
//	                     indexed twice is kept, never folded)
//	p_watermark          one row per published snapshot (version, publish_id, through_lsn, ...):
//	                     its inventory high-water (inventory_block; its members are the
//	                     inventory rows at or below it) and, for a compaction's or a
//	                     purge's publish, the members it removed (removes, removed)
//	p_publisher_lease    append-only publisher lease (term, lease_id, holder, expiry) and the
//	                     sole-claimant version claims (version, claim_id) a publish's renewal
//	                     carries; in memory, its newest rows only
//	p_snapshots          view: published snapshots with their member count
//	                     ((pack, destination) rows)
//	p_version_floor      the highest version published before each rebuild; never dropped
//	p_retention          the expiry horizon: one row per advance by the live publisher
//	                     (fenced), horizon = max; below it, snapshots not pinned are expired
//	p_snapshot_pins      append-only pin/unpin rows; the newest per version is its state
//	p_purges             append-only purge requests (requested, done, failed) per destination (purge.go)
//	p_rows.<schema.table>    per captured table: the rows of every destination
//	p_rows.<schema.table>@<n>  the same, of the table's generation n >= 2: opened by a
//	                         schema that changes a column's kind or the primary key
//	                         (tables.go generationOf, docs/adr/0028-table-generations.md)
//	p_latest.<schema.table>  view: that table as of the latest published snapshot
//
// A rows table's own columns (_sluice_destination, _sluice_store_id,
// _sluice_pack_id, beside the pack's system columns) and every alias of a
// statement over one are under proto.SystemPrefix, which no source column
// may use, so no source column name collides with them (sql.go rowDest,
// docs/adr/0044-reserved-catalog-names.md). The inventory and the other
// fixed tables keep their plain names: no source column lives there.
//
// NOTES
//   - A segment (packstore.EncodeSegment: every destination's rows of one
//     group commit and table, each row carrying _sluice_destination) is
//     indexed by one INSERT ... SELECT over its file taking each row's
//     destination from that column (a per-destination pack's is a literal),
//     then recorded by one inventory row per destination in one INSERT
//     (one part: all or none). A member is (store_id, pack_id,
//     destination, table) and a read filters its destination. A publish
//     admits and Pending counts (pack, destination) rows.
//   - The rows tables' ORDER BY is (_sluice_destination, primary key...,
//     _sluice_store_id, _sluice_pack_id, _sluice_lsn, _sluice_seq): pack
//     identity as the brief asks,
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
//   - Publish is three statements: renewal-and-claim (one row appended to
//     the lease table, fenced on the head it reads once), the publish (one
//     watermark row recording the high-water, INSERT ... SELECT over one
//     aggregate of the inventory rows above the previous high-water, under
//     the fence: two scalars named once in WITH, the lease head with the
//     sole-claim check and the latest watermark row with the version
//     barrier), and a read-back of the watermark rows at
//     or above the version (a sort-key range): the row records the lease
//     head the fence passed on (the publish's own renewal) and the
//     cumulative pack count, so a publish alone at its version reads
//     nothing else; a lost version or a conflict also reads the lease
//     head. Every publish renews the lease, at no extra statement: the
//     renewal row is the version claim. Process CPU per publish 20.4-26.1
//     ms, wall p50 22.8-38.2 ms (BenchmarkPublish -count 3, load 7-26);
//     33.9 ms CPU after 1,000 publishes (BenchmarkPublishHistory). Each
//     schema version and what it changed: docs/adr/0019-catalog-schema.md.
//   - Floors on chDB (BenchmarkPublishFloor, interleaved, load 1-8; wall
//     p50): SELECT 1 0.6-0.8 ms; a one-row INSERT into Memory about 1 ms,
//     into MergeTree 2.5-3.3 ms (compact part; fsync off is the default,
//     fsync on doubles it; insert_deduplicate, async_insert, query-log
//     settings, wide parts and auto statistics change nothing measurable;
//     StripeLog, Log and TinyLog cost the same as MergeTree); several
//     statements in one chDB call cost their sum; each scalar subquery over
//     a table 1-2 ms; an INSERT ... SELECT into MergeTree under the lease
//     fence 6.3-7.7 ms; the fenced renewal into Memory 3.4-4.8 ms; a
//     read-back 2.3-3.4 ms. In process CPU (the steady measure here), a
//     statement costs about 0.8 ms, each table it reads 1-1.5 ms more and a
//     part write 3.5 ms. So a publish that renews and claims, writes one
//     row under a fence that reads the lease and the watermark, finds the
//     unpublished packs (the inventory above the high-water) and reads
//     back cannot go below about 15-20 ms on this machine: the 10 ms target
//     is not met on chDB (see README, Benchmarks).
//   - A snapshot lists no members, so a publish admits any number of packs
//     (a rebuild publishes once).
//   - Never put the fence in a HAVING without GROUP BY: on the previous
//     query analyzer (enable_analyzer = 0) such a HAVING is ignored and the
//     aggregate row is returned anyway (measured on chDB 26.5), which would
//     publish without the lease. The fence is an outer WHERE.
//   - The lease and the claims, rewritten on every publish and only ever
//     read for their newest rows, live in one in-memory table bounded to its
//     newest rows (an in-memory table keeps each insert as a block that
//     every read walks); the watermark, which holds the high-waters and the
//     removals, stays MergeTree (durable: pinned snapshots).
//   - The admitted set and membership (docs/adr/0022-flat-membership.md): a
//     publish (and Pending) reads only inventory rows whose block number
//     (_block_number, persisted by enable_block_number_column so merges
//     keep it) is above the high-water the latest snapshot recorded, and
//     records the highest block it read as the new high-water: the members
//     of snapshot V are the inventory rows at or below V's high-water minus
//     the members removed (PublishReplace: compaction, purge) by the rows
//     at or below V, read from the rows that have a removal (a skip index
//     on removes). So neither a publish nor a read walks the history (a
//     full anti-join against member lists measured 6.5 ms at 5,000 packs,
//     27 ms at 50,000, 181 ms at 200,000). The engine allocates a block
//     number under the parts lock as the part becomes visible, so one
//     statement's read sees every row up to the highest block it reads.
//     The clockWindow test knob records as the high-water the highest
//     block among rows stamped after the last publish minus 30 s instead,
//     the negative control (TestStalledIndexerNegativeControl;
//     docs/adr/0020-publish-window-and-frontier.md). The high-water needs
//     the inventory's block numbers never handed out twice: a delete that
//     dropped the parts of its newest blocks would let the engine hand
//     those numbers out again after a restart.
//   - Rows INSERTs run with max_insert_threads = 2 and optimize_on_insert =
//     0 (rows equal on the whole sort key are copies of one change).
//   - A page read is two statements: the page's keys (LIMIT 1 BY, in key
//     order), then the resolution over that key range. The resolution
//     aggregates in an inner query and picks columns in an outer one, so
//     the winning tuple is not re-expanded at every reference (that
//     expansion made planning most of the read). Published versions and
//     small memberships (up to 2,000 packs per destination and table) are
//     cached: a published snapshot never changes. A read reads its
//     version's watermark row (a point of the sort key: the watermark's
//     index granularity is 64) and the latest version in sort-key order,
//     never every snapshot's row (TestMembershipIsFlat).
//   - Table names: p_rows.<schema>.<table> is quoted with backquotes; the
//     dot is the one separator that cannot occur inside either identifier.
package catalog
