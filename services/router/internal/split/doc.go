// Package split owns the router's hot path: it turns one Arrow record batch of
// a shared source table into one batch per destination, in one vectorized
// pass.
//
// The pass, for a batch of n rows:
//
//  1. one loop over the routing column's typed values (int16, int32, int64 or
//     utf8 — text and uuid travel as utf8) assigns every row a bucket id
//     through an open-addressing hash table keyed by the raw value; each
//     distinct value is turned into a destination name once per batch
//     (Resolve), never once per row. Bucket 0 collects unroutable rows (NULL,
//     a value that makes no valid destination, an unlisted value in mode
//     list with unlisted=dlq); dropped rows get no bucket;
//  2. a stable counting sort of the row indices by bucket (the permutation).
//     From 32K rows with more than one worker, steps 1 and 2 run in
//     parallel over contiguous row chunks (assign.go): chunk-local hash
//     tables, one serial merge over the distinct values only (buckets keep
//     their first-appearance numbering, Resolve still runs once per
//     distinct value), then every chunk writes its rows' buckets and new
//     indices from its own cursors (chunk w's rows of a bucket follow chunk
//     w-1's, so the sort stays stable). The result is identical to the
//     serial pass (TestChunkedMatchesSerial);
//  3. ONE take: every column is scattered with that permutation by a
//     hand-written kernel per physical layout (fixed width, bool, binary and
//     utf8 with 32- and 64-bit offsets, lists recursively; compute.Take for
//     anything else), in parallel across columns, costliest first. Variable
//     width values and list elements get their output space from one cursor
//     per bucket (a pass sums each bucket's bytes), so each moves in a single
//     pass with no second pass over the output; the move-out count and every
//     part's span are computed beside the take, from the input;
//  4. one zero-copy window of the permuted batch per destination, plus one
//     for the unroutable rows, whose column slices are built on first read
//     (part.go). The buckets are laid out in order of first appearance, or
//     with SplitBy by (rank, destination name), renumbered once every bucket
//     is known and before the counting sort: the router ranks by partition,
//     so consecutive parts of one rank are one window (Result.Window), which
//     is a partition's message.
//
// Rows of one destination keep their input order. Every row is routed by its
// own routing value, so the OpMoveOut row of a routing mutation (the old
// identity) lands in the old destination and its paired OpUpdate row in the
// new one.
//
// split owns no I/O, no goroutine that outlives a call, and no state across
// calls except pooled scratch space. It must never box a value per row, never
// route a row anywhere but the destination its own routing value names, and
// never lose or duplicate a row: every input row is in exactly one part, the
// dead-letter slice, or the dropped count.
//
// NOTES
//   - Performance (BenchmarkSplit, 2 shared cores under load 8-20; CPU time
//     of the process per op, steadier than wall time there): 1M rows x 10K
//     destinations, wide int64, ~140-200 ms CPU, 0.03 allocations per row
//     (the design it was chosen over: docs/adr/0021-router-split-pass.md). Measured and rejected: moving a list<utf8> row's child
//     elements as ranges (one pass per row) was slower than the element-wise
//     permutation (50 vs 41 ms CPU on the tags column: unpredictable
//     branches per row); a [32]byte copy compiles to a memmove call (two
//     [16]byte copies do not); 16-byte chunk copies up to 64 bytes (uuid
//     routing values) and an arena of distinct keys for the utf8 hash table
//     showed no gain over the noise (both memory-bound), so were left out.
//   - Measured with BenchmarkSplitAB (the baseline and the split of
//     the same batch alternately in one loop, so both see the same load;
//     setBaseline switches the three changes below off):
//   - Pooled buffers of 4 MiB or more ask for transparent huge pages
//     (pool.go, huge_linux.go): a 10K-run scatter writes to every page of
//     its output at once and, with 4 KiB pages, misses the TLB on nearly
//     every write. Alone, at 1M rows x 10K destinations under load 11-15:
//     CPU x0.86-0.99, wall x0.82-0.99; under heavier memory contention
//     (load ~20, a soak test beside) x0.55-0.66. All three changes together
//     at load 5-8: int64 CPU x0.79-0.97, wall x0.71-0.97; uuid CPU
//     x0.91-1.03, wall x0.79-0.99; 100K rows x 1K destinations within the
//     noise (CPU x0.93-1.03). In isolation a 12 MB utf8
//     scatter over 10K runs took 10.7-11.6 ms on 4 KiB pages and 7.7-8.2 ms
//     on huge pages.
//   - The routing-value hash pass (~8 ms per 1M int64 rows, ~40 ms per 1M
//     uuid strings) and the counting sort run before the take, serially
//     below 32K rows and chunked across the workers from 32K (assign.go). That cuts
//     wall time only when a second core is idle: it costs 3-7% more CPU
//     (every chunk builds its own table of the distinct values), and on
//     this shared machine under load 11-15 it measured wall x1.03-1.09.
//     serialAssign switches it off.
//   - The list kernel's per-element scratch (2 x 4 bytes per child element)
//     comes from a sync.Pool instead of two zeroed 4 MB slices per list
//     column per batch: alone, CPU x0.89-0.90 under load.
//   - Measured and rejected (same-process A/B, best of 15, one thread): a
//     flat list<leaf> kernel moving each row's child bytes, offsets and
//     validity as ranges in one pass (no per-element permutation): no
//     faster on text[] (35-42 vs 32-49 ms per 1M rows), slower on
//     mostly-NULL lists until empty rows were skipped, then equal; copying
//     utf8 values as one 32-byte store, as 8-byte chunks, or with 16-byte
//     stores only: within the noise of the 16/32 split; bytes gathered in
//     output order (sequential writes, random reads): 27 vs 15-17 ms; a
//     two-pass radix scatter (128 groups, then runs): no faster for fixed
//     width (1.8 vs 1.7 ms), 2x slower for utf8.
//   - The floor: the wide batch has ~25 random write streams per row (8
//     fixed-width columns, ~6 validity bitmaps, offsets and bytes of 3
//     variable-width columns, list offsets and child elements). Per 1M rows
//     and 10K runs, on one thread, a fixed-width stream costs ~1.8 ms and a
//     short utf8 value stream ~8-12 ms (each 16-32-byte store lands on a
//     line its run has not touched yet, and half of them span two lines):
//     ~100-110 ms for the take of the wide batch, so ~55 ms on two idle
//     cores plus the assignment (~5 ms int64 chunked, ~20 ms uuid). About
//     60 ms is this design's floor here, reachable only with both cores
//     free; going lower means moving fewer bytes (the encoder gathering
//     each part straight from the input instead of from a permuted batch),
//     not a faster scatter.
//   - Memory: the permuted batch is allocated from the injected
//     memory.Allocator; Result.Release frees it once every part is released
//     (parts are slices of it and hold references).
//   - Routing-mutation count: an OpMoveOut row counts as a mutation when its
//     paired row (the adjacent row at the same position, as the reader emits
//     it) routes to another destination, or when no adjacent pair is found.
package split
