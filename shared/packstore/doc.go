// Package packstore owns sluice's packs: the Store port, its two
// implementations (DirStore, a local directory; S3Store, S3-compatible
// object storage), and the pack file format itself — one Arrow IPC file (zstd from 64 KiB) whose footer
// schema metadata carries the proto.MetaPack* keys beside the table's own
// schema metadata.
//
// A pack is immutable: a Store never overwrites a path with different bytes
// (writing the same bytes again is an idempotent no-op), never exposes a
// partly written file, and never accepts a path outside the
// <destination>/<table>/<file> layout or the segment layout
// .seg/<YYYY-MM-DD>/<HH>/<table>/<id>.arrow (proto.SegmentPath). packstore must never decide what goes
// into a pack (resolution is the flusher's job) nor read the catalog.
//
// Every implementation must pass packstoretest.StoreContract.
//
// NOTES
//   - DirStore.Put is write temp file + fsync + link(2) into place (link never
//     clobbers, so two racing writers of one path cannot both win) + fsync of
//     the directory; the temp file is then removed.
//   - EncodePack derives Rows, Tombstones, First and Last from the rows'
//     system columns and refuses a PackMeta that disagrees with them.
//   - VerifyPack (and DecodePack, which keeps the batches) checks a whole pack
//     before arrow-go reads it (arrowcodec.VerifyFile: footer, blocks,
//     flatbuffers, compressed frames to their checksums), reads it through a
//     limited allocator, validates every batch fully, checks the columns
//     against their declared kinds and the footer's counts and positions
//     against the rows. ReadPackMeta checks only the footer. All recover
//     from panics inside the Arrow IPC reader and return errors wrapping
//     ErrCorruptPack.
//   - Every pack and segment carries proto.MetaPackChecksum, the XXH3-64 of
//     the whole file with the sum's own digits zeroed (checksum.go: written
//     over a placeholder once the file is complete), which VerifyPack
//     checks before reading any batch; a file without it (written before
//     checksums) is read as before. A mismatch is ErrCorruptPack naming the
//     file and both sums.
//   - A segment (EncodeSegment) is a pack of format proto.SegmentFormatVersion:
//     every destination's rows of one group commit and table, grouped by
//     destination (sorted by name), each row carrying proto.ColDestination
//     (utf8, the last column), its footer indexing each destination's row
//     range, rows, tombstones, first and last (proto.MetaPackDestinations).
//     VerifyPack checks that index against the rows: ranges contiguous and
//     covering, per-entry counts and positions, every row's destination its
//     entry's. A segment that fails is ErrCorruptPack like a damaged pack.
//   - Claim objects (claim.go) live under proto.ClaimsDir; the ClaimCollector
//     methods (ListClaims, DeleteClaim) serve the publisher's claim GC,
//     which owns the rule of when one may go (packstore keeps no references).
//   - DirStore.CleanTemp removes the temporary files of killed writes once
//     they are older than TempMaxAge (an hour); the indexer runs it.
package packstore
