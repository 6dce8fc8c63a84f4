package split

import (
	"hash/maphash"
	"strconv"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/proto"
)

// The chunked assignment: the routing pass and the counting sort, in
// parallel over contiguous row chunks (one per worker).
//
//  1. each chunk hashes its rows' routing values into a chunk-local table:
//     ids[i] becomes the value's index in the chunk's list of distinct values
//     (in order of first appearance), -1 for NULL; the chunk counts rows per
//     distinct value;
//  2. one serial merge, over distinct values only, turns every chunk's
//     values into buckets through one batch-wide table (Resolve is called
//     once per distinct value per batch, in order of first appearance, so
//     buckets are numbered as the serial pass numbers them) and sums every
//     chunk's rows per bucket;
//  3. each chunk rewrites its ids to buckets and writes its rows' new
//     indices: chunk w's rows of bucket b start after bucket b's rows of
//     chunks 0..w-1, so the sort stays stable.
//
// The serial merge touches each distinct value once per chunk; everything
// per row runs in parallel, the calling goroutine included (eachChunk).

// assignChunkRows is the smallest chunk worth a goroutine.
const assignChunkRows = 16 << 10

// forceChunks, when > 0, makes every Split use the chunked assignment with
// that many chunks, whatever the batch size: tests use it to put chunk
// boundaries everywhere.
var forceChunks = 0

// serialAssign switches the chunked assignment off (the serial routing pass
// and counting sort run instead): the benchmark's baseline.
var serialAssign = false

// achunk is one chunk's rows [lo, hi) and what its pass found.
type achunk struct {
	lo, hi int
	ikeys  []int64 // distinct integer values, first appearance first
	bkeys  []bslot // distinct utf8 values (val unused)
	counts []int   // rows per distinct value
	nulls  int     // NULL rows
	gmap   []int32 // distinct value -> bucket+2
	cur    []int32 // bucket -> this chunk's next new index
	dropAt int32   // this chunk's next new index for a dropped row
}

// chunksFor returns how many chunks to assign n rows with, 0 for the serial
// pass.
func (s *Splitter) chunksFor(n int) int {
	if forceChunks > 0 {
		return min(forceChunks, max(n, 1))
	}
	if serialAssign || s.workers <= 1 || n < 2*assignChunkRows {
		return 0
	}
	// One chunk per worker: every chunk builds a table of (nearly) every
	// distinct value, so chunks cost CPU (whole split, 1M rows, 10K values,
	// against the serial pass: one per worker +3-7%, two per worker
	// +2-10%) and each one lengthens the serial merge.
	return min(s.workers, n/assignChunkRows)
}

// assignChunked routes every row of col (the routing column) into
// a.counts and ids (bucket per row, the dropped rows' run for dropped rows)
// and writes inv, each row's index after the stable counting sort by
// bucket. It returns the buckets' first new rows.
func (s *Splitter) assignChunked(a *assigner, col arrow.Array, rec arrow.RecordBatch, cols columns, ids, inv []int32, nc int) []int {
	n := len(ids)
	chunks := make([]achunk, nc)
	for w := range chunks {
		chunks[w].lo, chunks[w].hi = w*n/nc, (w+1)*n/nc
	}
	seed := maphash.MakeSeed()
	var data []byte
	var offs []int32
	sc, isString := col.(*array.String)
	if isString {
		offs = sc.ValueOffsets()
		if b := sc.Data().Buffers()[2]; b != nil {
			data = b.Bytes()
		}
	}

	// 1. chunk-local distinct values.
	run := func(f func(c *achunk)) { s.eachChunk(chunks, f) }
	// NullN computes and caches the count on first call (a sliced array's
	// is unknown): call it once here, not from every chunk at once.
	hasNulls := col.NullN() > 0
	run(func(c *achunk) {
		switch col := col.(type) {
		case *array.Int16:
			localInts(c, col, col.Int16Values(), hasNulls, ids, a.hint)
		case *array.Int32:
			localInts(c, col, col.Int32Values(), hasNulls, ids, a.hint)
		case *array.Int64:
			localInts(c, col, col.Int64Values(), hasNulls, ids, a.hint)
		case *array.String:
			localStrings(c, col, offs, data, seed, hasNulls, ids, a.hint)
		}
		if unsafeMoveOutFollowsPair {
			breakIsolationLocal(rec, cols, ids, c)
		}
	})

	// 2. the serial merge: distinct values -> buckets, rows per bucket.
	var it *intTable
	var bt *bytesTable
	if isString {
		bt = newBytesTableSeed(data, seed, a.hint)
	} else {
		it = newIntTable(a.hint)
	}
	for w := range chunks {
		c := &chunks[w]
		c.gmap = make([]int32, len(c.counts))
		for j, k := range c.ikeys {
			v := it.get(k)
			if v == 0 {
				v = a.route(strconv.FormatInt(k, 10))
				it.put(k, v)
			}
			c.gmap[j] = v
		}
		for j, k := range c.bkeys {
			val := data[k.start:k.end]
			v := bt.get(k.hash, val)
			if v == 0 {
				v = a.route(string(val))
				bt.put(k.hash, k.start, k.end, v)
			}
			c.gmap[j] = v
		}
	}
	var nullV int32
	for w := range chunks {
		if chunks[w].nulls > 0 {
			nullV = a.nullBucket()
		}
	}
	if remap := a.reorder(); remap != nil {
		for w := range chunks {
			for j, v := range chunks[w].gmap {
				if v >= 2 {
					chunks[w].gmap[j] = remap[v-2] + 2
				}
			}
		}
	}
	nb := len(a.counts)
	for w := range chunks {
		c := &chunks[w]
		c.cur = make([]int32, nb)
		for j, r := range c.counts {
			if b := c.gmap[j] - 2; b >= 0 {
				c.cur[b] += int32(r) // rows per bucket for now
			} else {
				a.dropped += r
			}
		}
		if c.nulls > 0 {
			c.cur[nullV-2] += int32(c.nulls)
		}
	}
	// Every chunk's cursor per bucket, and the dropped rows' places after
	// every bucket.
	starts := make([]int, nb)
	total := 0
	for b := range nb {
		starts[b] = total
		for w := range chunks {
			r := chunks[w].cur[b]
			chunks[w].cur[b] = int32(total)
			total += int(r)
		}
		a.counts[b] = total - starts[b]
	}
	dropAt := int32(total)
	for w := range chunks {
		c := &chunks[w]
		c.dropAt = dropAt
		for j, r := range c.counts {
			if c.gmap[j] < 2 {
				dropAt += int32(r)
			}
		}
	}

	// 3. buckets and new indices.
	dropRun := int32(nb)
	run(func(c *achunk) {
		gmap, cur, dropAt := c.gmap, c.cur, c.dropAt
		nullB := nullV - 2
		ids := ids[c.lo:c.hi]
		inv := inv[c.lo:c.hi]
		for i, j := range ids {
			b := nullB
			if j >= 0 {
				b = gmap[j] - 2
			}
			if b >= 0 {
				ids[i], inv[i] = b, cur[b]
				cur[b]++
				continue
			}
			ids[i], inv[i] = dropRun, dropAt
			dropAt++
		}
	})
	return starts
}

// eachChunk runs f on every chunk: the calling goroutine and up to
// workers-1 helpers claim chunks in order until none is left, so on a
// saturated machine, where a helper may wait long for a CPU, the caller goes
// on with the chunks the helpers have not claimed instead of waiting.
func (s *Splitter) eachChunk(chunks []achunk, f func(c *achunk)) {
	var next atomic.Int32
	work := func() {
		for {
			w := int(next.Add(1)) - 1
			if w >= len(chunks) {
				return
			}
			f(&chunks[w])
		}
	}
	var g errgroup.Group
	for range min(s.workers, len(chunks)) - 1 {
		g.Go(func() error { work(); return nil })
	}
	work()
	_ = g.Wait() // f never fails
}

// localInts is step 1 for an integer routing column.
func localInts[T integer](c *achunk, arr arrow.Array, vals []T, hasNulls bool, ids []int32, hint int) {
	t := newIntTable(min(hint, c.hi-c.lo))
	var lastK int64
	lastJ := int32(-1)
	vals, ids2 := vals[c.lo:c.hi], ids[c.lo:c.hi]
	for i, x := range vals {
		if hasNulls && arr.IsNull(c.lo+i) {
			ids2[i] = -1
			c.nulls++
			continue
		}
		k := int64(x)
		if lastJ < 0 || k != lastK {
			v := t.get(k)
			if v == 0 {
				v = int32(len(c.ikeys)) + 1
				c.ikeys = append(c.ikeys, k)
				c.counts = append(c.counts, 0)
				t.put(k, v)
			}
			lastK, lastJ = k, v-1
		}
		ids2[i] = lastJ
		c.counts[lastJ]++
	}
}

// localStrings is step 1 for a utf8 routing column.
func localStrings(c *achunk, arr *array.String, offs []int32, data []byte, seed maphash.Seed, hasNulls bool, ids []int32, hint int) {
	t := newBytesTableSeed(data, seed, min(hint, c.hi-c.lo))
	var last []byte
	lastJ := int32(-1)
	for i := c.lo; i < c.hi; i++ {
		if hasNulls && arr.IsNull(i) {
			ids[i] = -1
			c.nulls++
			continue
		}
		s, e := offs[i], offs[i+1]
		val := data[s:e]
		if lastJ < 0 || string(val) != string(last) {
			h := t.hash(val)
			v := t.get(h, val)
			if v == 0 {
				v = int32(len(c.bkeys)) + 1
				c.bkeys = append(c.bkeys, bslot{hash: h, start: int64(s), end: int64(e)})
				c.counts = append(c.counts, 0)
				t.put(h, int64(s), int64(e), v)
			}
			last, lastJ = val, v-1
		}
		ids[i] = lastJ
		c.counts[lastJ]++
	}
}

// breakIsolationLocal is breakIsolation (the negative control's knob) on a
// chunk's local ids: a move-out row takes its next row's value.
func breakIsolationLocal(rec arrow.RecordBatch, cols columns, ids []int32, c *achunk) {
	ops := rec.Column(cols.op).(*array.Int8).Int8Values()
	for i := c.lo; i+1 < c.hi; i++ {
		if ops[i] == proto.OpMoveOut && ids[i] >= 0 && ids[i+1] >= 0 {
			c.counts[ids[i]]--
			ids[i] = ids[i+1]
			c.counts[ids[i]]++
		}
	}
}
