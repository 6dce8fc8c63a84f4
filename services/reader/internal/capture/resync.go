package capture

// The stream's half of a live resync (DBLog: Andreas Andreakis and Ioannis
// Papapanagiotou, "DBLog: A Watermark Based Change-Data-Capture Framework",
// Netflix 2019). The resync worker (services/reader resync.go) copies a
// table in primary-key chunks; each chunk is bracketed in the WAL by a low
// watermark (LW) and a high watermark (HW), non-transactional logical
// messages (pg_logical_emit_message(false, 'sluice.resync', …)) that the
// stream receives at their place among the commits. Between a chunk's LW and
// HW the stream records every key of the table it changed; at the HW the
// chunk's rows whose key the stream changed are dropped (the stream's
// version is newer than, or as new as, the copy) and the rest are published
// as inserts positioned just below the HW, through the session's own
// pipeline, in stream order.
//
// Why HW-1 is the right position: the chunk's SELECT runs after the LW and
// before the HW, so every commit it sees starts before the HW record, and
// every commit after the HW record starts at or after the HW message's LSN
// (pgoutput gives a message the end of its record). One byte below is above
// the first and below the second, and no commit record starts there. A
// commit between the LW and the HW that the SELECT did not see changed only
// keys that are dropped. What remains is a commit whose record precedes the
// LW but that the SELECT's snapshot does not see yet: pgoutput sends a commit
// once its WAL is flushed, a moment before the committing backend leaves the
// proc array (a synchronous standby that does not answer makes the moment
// long). The stream keeps the xids of the last transactions of every table
// (xidRing) and a chunk whose snapshot does not see one of those committed
// before its LW is copied again.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
)

// ResyncPrefix is the prefix of the resync's logical messages.
const ResyncPrefix = "sluice.resync"

// Watermark kinds.
const (
	MarkLow  = "lw"
	MarkHigh = "hw"
	MarkEnd  = "end"
)

// Mark is the content of a resync message (JSON).
type Mark struct {
	Slot  string `json:"slot"`
	Token string `json:"token"` // one chunk attempt: a replayed mark of a lost attempt matches nothing
	Kind  string `json:"kind"`
}

// Errors a chunk ends with.
var (
	// ErrChunkLost: the session that would have seen the chunk's HW ended
	// (or never registered its LW); copy the chunk again.
	ErrChunkLost = errors.New("resync chunk lost with its replication session")
	// ErrChunkRetry: the chunk is unsafe to publish (its snapshot misses a
	// commit before its LW, or the table's schema changed inside it).
	ErrChunkRetry = errors.New("resync chunk must be copied again")
)

// Chunk is one chunk attempt, handed from the worker to the stream. The
// worker sets the rows (SetRows) before it writes the HW.
type Chunk struct {
	Token string
	Table string
	// First: the resync's first chunk. A halted table streams again from
	// its LW (the resync re-copies what the halt dropped).
	First bool
	// End: the resync's end mark (no rows): the stream clears the scope's
	// rows older than Bound that the resync did not re-copy.
	End   bool
	Value *string        // the routing value of a per-destination resync
	Bound proto.Position // for End

	mu     sync.Mutex
	schema *batch.Schema
	rows   [][][]byte // text forms in schema column order; nil: NULL
	snap   string     // the SELECT's snapshot (pg_current_snapshot() text)
	done   chan ChunkResult
}

// ChunkResult is what the stream did with a chunk.
type ChunkResult struct {
	Err       error
	LW, HW    proto.LSN // the marks' positions (End: HW is the end mark's)
	Published int       // rows published
	Dropped   int       // rows the stream changed inside the window
	// Unhalted: the table was halted at the first chunk's LW and streams
	// again from there (also when it halted after the resync started: the
	// resync then recovers that halt).
	Unhalted bool
}

// SetRows hands the chunk's rows (in sc's column order) and the snapshot
// they were read at to the stream.
func (c *Chunk) SetRows(sc *batch.Schema, rows [][][]byte, snap string) {
	c.mu.Lock()
	c.schema, c.rows, c.snap = sc, rows, snap
	c.mu.Unlock()
}

// Schema is the schema the chunk's rows were read with.
func (c *Chunk) Schema() *batch.Schema {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.schema
}

// Done delivers the chunk's result once.
func (c *Chunk) Done() <-chan ChunkResult { return c.done }

func (c *Chunk) finish(r ChunkResult) {
	select {
	case c.done <- r:
	default:
	}
}

// Resyncer is the hand-over between the resync worker and the stream: the
// chunks in flight, by token. Safe for concurrent use.
type Resyncer struct {
	mu     sync.Mutex
	chunks map[string]*Chunk
	gen    atomic.Int64 // sessions started
	// NoHighWatermarkCheckForTest publishes every row of a chunk, even the
	// ones the stream changed inside its window (a negative control).
	NoHighWatermarkCheckForTest bool
	// NoClearForTest ends a resync without its clear (a negative control:
	// rows deleted at the source stay in the destination).
	NoClearForTest bool
	// NoWindowFillForTest leaves the TOAST-unchanged values of an update
	// inside a chunk window unread (a negative control: the resync's clear
	// removes the rows that held them).
	NoWindowFillForTest bool
}

// NewResyncer returns an empty hand-over.
func NewResyncer() *Resyncer { return &Resyncer{chunks: map[string]*Chunk{}} }

// Register adds a chunk attempt; its marks are matched by token.
func (r *Resyncer) Register(c *Chunk) *Chunk {
	c.done = make(chan ChunkResult, 1)
	r.mu.Lock()
	r.chunks[c.Token] = c
	r.mu.Unlock()
	return c
}

// Forget drops a chunk attempt (its marks are ignored from now on); the
// worker calls it once it has the chunk's result.
func (r *Resyncer) Forget(c *Chunk) {
	r.mu.Lock()
	delete(r.chunks, c.Token)
	r.mu.Unlock()
}

// Generation counts the sessions started: a chunk registered in one
// generation is lost when the next starts.
func (r *Resyncer) Generation() int64 { return r.gen.Load() }

// ClearHalt runs clear (which lifts a table's halt) unless a session
// started after generation gen: that session read the table as halted and
// drops its changes, so the resync that lifted it in an earlier session
// does not cover them. It reports whether clear ran.
func (r *Resyncer) ClearHalt(gen int64, clear func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen.Load() != gen {
		return false
	}
	clear()
	return true
}

func (r *Resyncer) lookup(token string) *Chunk {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.chunks[token]
}

// sessionStarted fails every chunk in flight: a new session replays from
// the confirmed LSN, where their marks are either before the start or are
// matched by a chunk nobody holds the rows of any more.
// load reads the halted tables under the same lock as ClearHalt.
func (r *Resyncer) sessionStarted(load func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen.Add(1)
	load()
	for tok, c := range r.chunks {
		c.finish(ChunkResult{Err: ErrChunkLost})
		delete(r.chunks, tok)
	}
}

// window is a chunk between its LW and its HW in the stream.
type window struct {
	chunk *Chunk
	lw    proto.LSN
	keys  map[string]struct{}
	// schemaGen is the table's tableState.schemaGen at the LW.
	schemaGen int
	unhalted  bool // ChunkResult.Unhalted
}

// xidRing holds the xids (and commit positions) of a table's last
// transactions, for the visibility check of a chunk.
type xidRing struct {
	xids [64]uint32
	lsns [64]proto.LSN
	n    int
	last uint32
}

func (x *xidRing) add(xid uint32, lsn proto.LSN) {
	if x.n > 0 && x.last == xid && x.lsns[(x.n-1)%len(x.lsns)] == lsn {
		return
	}
	x.xids[x.n%len(x.xids)], x.lsns[x.n%len(x.lsns)] = xid, lsn
	x.n++
	x.last = xid
}

// invisibleBefore returns an xid committed before lw that snap does not see.
func (x *xidRing) invisibleBefore(lw proto.LSN, snap string) (uint32, bool, error) {
	for i := 0; i < min(x.n, len(x.xids)); i++ {
		if x.lsns[i] >= lw {
			continue
		}
		ok, err := source.XidVisible(snap, x.xids[i])
		if err != nil {
			return 0, false, err
		}
		if !ok {
			return x.xids[i], true, nil
		}
	}
	return 0, false, nil
}

// rowKey encodes the key values of a row (length-prefixed text forms).
func rowKey(dst []byte, idx []int, vals [][]byte) []byte {
	for _, i := range idx {
		var v []byte
		if i < len(vals) {
			v = vals[i]
		}
		dst = binary.AppendUvarint(dst, uint64(len(v)))
		dst = append(dst, v...)
	}
	return dst
}

// touch records, for a table inside a chunk window, the key of a row the
// stream carries, and the transaction in the table's xid ring.
func (s *session) touch(t *tableState, r *batch.Row) {
	t.xids.add(s.txXid, proto.LSN(s.txLSN))
	if t.window == nil || t.schema == nil {
		return
	}
	s.keyBuf = rowKey(s.keyBuf[:0], t.schema.KeyIdx, r.Values)
	t.window.keys[string(s.keyBuf)] = struct{}{}
}

// message handles a logical decoding message: the resync's marks.
func (s *session) message(ctx context.Context, m pgoutput.Message) error {
	if m.Prefix != ResyncPrefix || m.Transactional || s.o.Resync == nil {
		return nil
	}
	var mk Mark
	if err := json.Unmarshal(m.Content, &mk); err != nil || mk.Slot != s.o.Slot {
		return nil // another slot's, or not ours to read
	}
	c := s.o.Resync.lookup(mk.Token)
	if c == nil {
		return nil // a lost attempt's mark, replayed
	}
	at := proto.LSN(m.LSN)
	t := s.tables[c.Table]
	if t == nil {
		c.finish(ChunkResult{Err: fmt.Errorf("resync of %s: the table is not captured", c.Table)})
		return nil
	}
	switch mk.Kind {
	case MarkLow:
		// Only a resync of every destination makes a halted table stream
		// again (the halt dropped every destination's changes); a scoped
		// chunk of a halted table fails at its HW.
		unhalted := c.First && t.halted && c.Value == nil
		if unhalted {
			if err := s.unhalt(ctx, t); err != nil {
				return err
			}
		}
		t.window = &window{chunk: c, lw: at, keys: map[string]struct{}{}, schemaGen: t.schemaGen, unhalted: unhalted}
	case MarkHigh:
		w := t.window
		if w == nil || w.chunk != c {
			return nil
		}
		t.window = nil
		res, err := s.publishChunk(ctx, t, w, at)
		if err != nil {
			return err
		}
		if res.Err != nil {
			c.finish(res)
		}
	case MarkEnd:
		if t.halted {
			c.finish(ChunkResult{Err: fmt.Errorf("resync of %s: the table halted again: %s", c.Table, s.o.State.Halted(c.Table))})
			return nil
		}
		// The stream's rows so far, then the clear, in this order.
		if err := s.cut(ctx, t, s.clean); err != nil {
			return err
		}
		if err := s.emitResyncClear(ctx, t, c); err != nil {
			return err
		}
		c.finish(ChunkResult{HW: at})
	}
	return nil
}

// emitResyncClear ends a resync with a clear (EmitClear) of the table, or
// of the one routing value, at bound (the first chunk's LW): every row of
// the scope older than bound that the resync did not re-copy and the stream
// did not change since is hidden, so rows deleted at the source before the
// resync leave the destination. A table the stream has sent no Relation
// for in this session (no change since it started) takes the schema of the
// resync's last chunk, the one its rows were published with.
func (s *session) emitResyncClear(ctx context.Context, t *tableState, c *Chunk) error {
	if t.schema == nil {
		c.mu.Lock()
		sc := c.schema
		c.mu.Unlock()
		if sc == nil {
			return fmt.Errorf("%w: the end of the resync of %s carries no schema", ErrReplication, t.info.Name)
		}
		t.schema = sc
		defer func() { t.schema = nil }()
	}
	if s.o.Resync.NoClearForTest {
		return nil
	}
	return s.EmitClear(ctx, t.info.Name, c.Value, c.Bound)
}

// unhalt makes a halted table stream again (a resync's first LW): with the
// latest Relation message the stream sent for it, or with the schema it had.
func (s *session) unhalt(ctx context.Context, t *tableState) error {
	s.o.Log.Info("resync: the halted table streams again from the resync's first chunk", "table", t.info.Name)
	t.halted = false
	s.o.Kinds.Forget(t.info.Name)
	if rel := t.pendingRel; rel != nil {
		// The latest Relation can predate the fix the operator made (a
		// replica identity set right again sends a new one only with the
		// table's next change); the worker checked the source's current
		// identity before the resync started.
		t.pendingRel = nil
		t.schema, t.relCols = nil, nil
		t.release()
		t.identityChecked, t.kindsChecked = true, true
		defer func() { t.identityChecked, t.kindsChecked = false, false }()
		return s.relation(ctx, *rel)
	}
	if t.schema != nil && t.b == nil {
		t.b = batch.NewBuilder(s.o.Mem, t.schema, s.o.Append)
	}
	return nil
}

// publishChunk publishes the chunk's rows the stream did not change inside
// its window, at (hw-1, ordinal). A result with Err set means the chunk was
// not published (the worker copies it again or fails the resync); the
// returned error ends the session.
func (s *session) publishChunk(ctx context.Context, t *tableState, w *window, hw proto.LSN) (ChunkResult, error) {
	c := w.chunk
	c.mu.Lock()
	sc, rows, snap := c.schema, c.rows, c.snap
	c.rows = nil
	c.mu.Unlock()
	res := ChunkResult{LW: w.lw, HW: hw, Unhalted: w.unhalted}
	switch {
	case t.halted:
		res.Err = fmt.Errorf("resync of %s: the table halted: %s", t.info.Name, s.o.State.Halted(t.info.Name))
		return res, nil
	case sc == nil:
		res.Err = fmt.Errorf("%w: no rows were handed over before the HW", ErrChunkLost)
		return res, nil
	case t.schema != nil && t.schema.Fingerprint != sc.Fingerprint && t.schemaGen != w.schemaGen:
		// A Relation inside the window: the stream's schema may be newer
		// than the snapshot's, or older.
		res.Err = fmt.Errorf("%w: the schema of %s changed inside the chunk", ErrChunkRetry, t.info.Name)
		return res, nil
	}
	// The chunk's schema differs from the stream's, and the stream's is
	// from before the LW: the table changed after its last Relation message
	// and before the chunk's snapshot (a change without WAL, seen by the
	// periodic check), so that change is below the HW and pgoutput sends a
	// Relation message before the table's next change. The chunk's schema
	// is the table's until then (adoptChunkSchema).
	adopt := t.schema != nil && t.schema.Fingerprint != sc.Fingerprint
	if xid, bad, err := t.xids.invisibleBefore(w.lw, snap); err != nil {
		return res, err
	} else if bad && !s.o.Resync.NoHighWatermarkCheckForTest {
		res.Err = fmt.Errorf("%w: its snapshot does not see transaction %d, committed before its low watermark", ErrChunkRetry, xid)
		return res, nil
	}
	// A column whose kind changed opens the table's next generation in the
	// catalog, which holds only what is sent from then on: only a copy of
	// every destination's rows fills it.
	if col, was, changed := s.o.Kinds.Changed(t.info.Name, sc.Columns); changed && c.Value != nil {
		res.Err = fmt.Errorf("resync of %s for one routing value: column %s changed kind from %s to %s; resync the whole table (sluice resync --table %s)", t.info.Name, col.Name, was, col.Kind, t.info.Name)
		return res, nil
	}
	if err := s.o.Kinds.Note(ctx, sc); err != nil {
		return res, err
	}
	// The stream's rows of this table before the HW go first.
	if err := s.cut(ctx, t, s.clean); err != nil {
		return res, err
	}
	if adopt {
		s.o.Log.Info("resync: the table's schema changed since its last Relation message; the chunk's schema is the table's until the next one", "table", t.info.Name, "fingerprint", sc.Fingerprint)
		t.release()
		t.schema, t.relCols = sc, nil
		t.b = batch.NewBuilder(s.o.Mem, sc, s.o.Append)
	}
	b := batch.NewBuilder(s.o.Mem, sc, s.o.Append)
	defer b.Release()
	var cb *batch.Builder
	defer func() {
		if cb != nil {
			cb.Release()
		}
	}()
	var outs []Out
	emit := func(b *batch.Builder, claimed int64) error {
		if b.Rows() == 0 {
			return nil
		}
		rec := b.Cut()
		parts, err := encodeParts(rec, s.o.MaxPayload, s.o.Metrics)
		rec.Release()
		if err != nil {
			return fmt.Errorf("encoding a resync chunk of %s: %w", t.info.Name, err)
		}
		for _, p := range parts {
			outs = append(outs, claimedOut(batchOut(t.info.Name, b.Schema.Fingerprint, p.first, p.last, s.clean, p.rows, p.body), claimed))
		}
		return nil
	}
	now := time.Now()
	row := batch.Row{Op: proto.OpInsert, CommitTime: now}
	var ord uint64
	for _, vals := range rows {
		if !s.o.Resync.NoHighWatermarkCheckForTest {
			s.keyBuf = rowKey(s.keyBuf[:0], sc.KeyIdx, vals)
			if _, changed := w.keys[string(s.keyBuf)]; changed {
				res.Dropped++
				continue
			}
		}
		ord++
		row.Pos = proto.Position{LSN: hw - 1, Seq: ord}
		row.SetText(vals)
		if pickClaims(s.o, sc, &row) {
			claimed, err := writeClaims(ctx, s.o, sc, &row)
			if err != nil {
				return res, fmt.Errorf("resync of %s: %w", t.info.Name, err)
			}
			if err := emit(b, 0); err != nil {
				return res, err
			}
			if cb == nil {
				cb = batch.NewBuilder(s.o.Mem, sc.WithClaims(), s.o.Append)
			}
			if err := cb.Append(&row); err != nil {
				res.Err = fmt.Errorf("resync of %s: %w", t.info.Name, err)
				return res, nil
			}
			if err := emit(cb, claimed); err != nil {
				return res, err
			}
			continue
		}
		if err := b.Append(&row); err != nil {
			res.Err = fmt.Errorf("resync of %s: %w", t.info.Name, err)
			return res, nil
		}
		if b.Rows() >= s.o.BatchRows || b.Bytes() >= s.o.BatchBytes {
			if err := emit(b, 0); err != nil {
				return res, err
			}
		}
	}
	if err := emit(b, 0); err != nil {
		return res, err
	}
	res.Published = int(ord)
	s.o.Metrics.ResyncRows.WithLabelValues(t.info.Name).Add(float64(ord))
	if len(outs) == 0 {
		c.finish(res)
		return ChunkResult{}, nil
	}
	// The chunk is done when its last message is acked: the pipeline acks
	// in order of the confirmed prefix, so the ones before are too.
	var pending atomic.Int64
	pending.Store(int64(len(outs)))
	for _, o := range outs {
		o.onAck = func() {
			if pending.Add(-1) == 0 {
				c.finish(res)
			}
		}
		o.Span = s.span(o)
		if err := s.send(ctx, o); err != nil {
			return res, err
		}
	}
	return ChunkResult{}, nil
}
