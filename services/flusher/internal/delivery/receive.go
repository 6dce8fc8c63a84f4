package delivery

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
	"github.com/sluice-cdc/sluice/services/flusher/internal/resolve"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/natsotel"
	"github.com/sluice-cdc/sluice/shared/natsx"
)

const (
	fetchBatch = 256
	fetchWait  = 500 * time.Millisecond
	// fetchRetryMaxAttempt caps a failing fetch's backoff at
	// natsx.Backoff's fifth step, [0.8 s, 1.6 s).
	fetchRetryMaxAttempt = 5
)

// A buffered message costs more heap than its body and column buffers: the
// jetstream.Msg and its headers, the decoded batch's schema (a copy per
// message, with metadata), array and buffer objects and allocator padding,
// the item and its pending entry. Measured with BenchmarkFanout (heap-B/msg
// against counted-B/msg) on a 9-column one-row batch: about 13 KiB beyond
// the bytes. It is counted against delivery.memory_budget, so the watermark
// holds with many small messages.
const (
	msgOverhead = 4 << 10
	colOverhead = 1 << 10
)

// fetchLoop pulls partition p's messages until ctx ends. It stops fetching
// (instead of sleeping per message) while memory is at the watermark or the
// partition holds MaxAckPending messages.
func (m *Manager) fetchLoop(ctx context.Context, p *part) {
	defer close(p.done)
	paused := false
	fetchFailures := 0
	for ctx.Err() == nil {
		m.mu.Lock()
		room := m.dc.MaxAckPending - p.held
		blocked := m.overBudgetLocked() || room <= 0
		// Fetch no more than this partition's share of the memory left
		// below the watermark, at the observed bytes per message, so
		// concurrent fetches do not overshoot the budget by whole batches.
		if per := m.bytesPerMsgLocked(); per > 0 {
			left := (int64(m.dc.MemoryBudget) - m.heldBytesLocked()) / int64(max(len(m.parts), 1))
			room = min(room, int(max(left/per, 1)))
		}
		gen := p.c.Gen()
		lost := p.c.Lost()
		m.checkDeadlineLocked(p)
		mayFetch := p.c.MayFetch()
		m.mu.Unlock()
		if lost {
			return
		}
		if !mayFetch {
			// Past the local lease deadline: the renewal decides.
			m.settle(ctx, p)
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if m.pauseFetch.Load() {
			m.fetchPausedSeen.Store(true)
		}
		if blocked || m.pauseFetch.Load() {
			if !paused {
				paused = true
				m.m.fetchPaused.Inc()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		paused = false
		m.settle(ctx, p)
		m.releaseHeldClears(ctx, p)
		// natsx.Fetch: a server-side expiry, never a FetchContext, which
		// strands messages until AckWait. Shutdown waits for the open fetch
		// (under fetchWait + 1s).
		batch, err := natsx.Fetch(p.cons, min(room, fetchBatch), fetchWait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// A transient error (a leader election, a reconnect): back off
			// with jitter, so a partition's fetches do not retry in step,
			// capped low (fetchRetryMaxAttempt) so a healed stream is read
			// again within a second or two.
			fetchFailures++
			m.log.Warn("fetching", "partition", p.id, "attempt", fetchFailures, "error", err)
			if !natsx.Sleep(ctx, natsx.Backoff(min(fetchFailures, fetchRetryMaxAttempt))) {
				return
			}
			continue
		}
		fetchFailures = 0
		// Messages already arrived are received as one group: the cursors
		// of their new destinations load in one statement.
		msgs := batch.Messages()
		for msg := range msgs {
			group := []jetstream.Msg{msg}
		more:
			for len(group) < fetchBatch {
				select {
				case x, ok := <-msgs:
					if !ok {
						break more
					}
					group = append(group, x)
				default:
					break more
				}
			}
			m.receiveGroup(ctx, p, group, gen)
		}
		if err := natsx.FetchErr(batch); err != nil && ctx.Err() == nil {
			m.log.Debug("fetch ended", "partition", p.id, "error", err)
		}
	}
}

// parse decodes one ROUTED message into its destination slices (items,
// without their dest): a partition message (proto.RoutedPartitionSubject)
// has one per run of proto.ColDestination, each a zero-copy slice of the
// decoded batch without that column, so each is exactly what a
// per-destination message carried; a per-destination message
// (proto.RoutedSubject, from before partition messages) is one slice.
func (m *Manager) parse(ctx context.Context, p *part, msg jetstream.Msg) ([]*item, error) {
	legacy := "" // the destination of a per-destination message
	if msg.Subject() != p.subject {
		part, name, err := proto.ParseRoutedSubject(msg.Subject())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadMessage, err)
		}
		if part != p.id {
			return nil, fmt.Errorf("%w: subject %s is not in partition %d", ErrBadMessage, msg.Subject(), p.id)
		}
		legacy = name
	}
	h := msg.Headers()
	if err := proto.CheckWire(h.Get(proto.HeaderWire)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	rec, err := arrowcodec.Decode(msg.Data(), m.mem)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	defer rec.Release()
	table := h.Get(proto.HeaderTable)
	if table == "" {
		table, _ = rec.Schema().Metadata().GetValue(proto.MetaTable)
	}
	if err := proto.ValidateTable(table); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	var runs []proto.DestinationRun
	var sc *arrow.Schema
	col := -1
	if legacy != "" {
		if len(rec.Schema().FieldIndices(proto.ColDestination)) > 0 {
			return nil, fmt.Errorf("%w: per-destination message %s carries %s", ErrBadMessage, msg.Subject(), proto.ColDestination)
		}
		runs, sc = []proto.DestinationRun{{Destination: legacy, Lo: 0, Hi: rec.NumRows()}}, rec.Schema()
	} else {
		if runs, col, err = proto.DestinationRuns(rec); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadMessage, err)
		}
		if len(runs) == 0 {
			return nil, fmt.Errorf("%w: empty partition message", ErrBadMessage)
		}
		sc = withoutField(rec.Schema(), col)
	}
	fp := h.Get(proto.HeaderSchema)
	if fp == "" {
		fp = arrowcodec.Fingerprint(sc)
	}
	// The message's counted bytes (as a per-destination message was
	// counted), shared out among its slices by rows: the slices share the
	// decoded buffers, freed when the last is released.
	total := int64(len(msg.Data())) + msgOverhead + colOverhead*rec.NumCols()
	for _, c := range rec.Columns() {
		for _, b := range c.Data().Buffers() {
			if b != nil {
				total += int64(b.Len())
			}
		}
	}
	// Values carried by reference are read whole at the flush: counted
	// at their size from now on, so the budget flushes before they come in.
	if cb, err := strconv.ParseInt(h.Get(proto.HeaderClaimBytes), 10, 64); err == nil && cb > 0 {
		total += cb
	}
	shared := &message{msg: msg, slices: len(runs), touched: time.Now()}
	var seq, delivered uint64
	if meta, err := msg.Metadata(); err == nil {
		seq, delivered = meta.Sequence.Stream, meta.NumDelivered
	}
	if sc := trace.SpanContextFromContext(natsotel.Extract(ctx, h)); sc.IsValid() {
		shared.link = trace.Link{SpanContext: sc}
	}
	sc = m.internSchema(fp, sc)
	lsn, seqs, err := positionCols(rec)
	if err != nil {
		return nil, err
	}
	// A batch resolve cannot read halts the destinations at their flush
	// (resolve finds the columns again and fails), not here.
	cols, _ := resolve.ColumnsOf(rec, sc)
	its := make([]*item, 0, len(runs))
	// The message's slices in one allocation (they live about as long as
	// each other, and share the message's batch anyway): at 10,000
	// destinations a message has hundreds of one-row slices.
	block := make([]item, len(runs))
	left, rows := total, rec.NumRows()
	for k, r := range runs {
		if r.Lo >= r.Hi {
			return nil, fmt.Errorf("%w: empty destination run", ErrBadMessage)
		}
		it := &block[k]
		*it = item{m: shared, dest: r.Destination, seq: seq, delivered: delivered, src: rec, lo: r.Lo, hi: r.Hi, sc: sc, cols: cols,
			table: table, fp: fp, rows: r.Hi - r.Lo, slices: len(runs)}
		it.first, it.last = positions(lsn, seqs, r.Lo, r.Hi)
		its = append(its, it)
		it.bytes = total * it.rows / max(rows, 1)
		if k == len(runs)-1 {
			it.bytes = left
		}
		left -= it.bytes
	}
	for range its {
		rec.Retain() // one reference per slice; parse's own is released
	}
	return its, nil
}

// withoutField is sc without field i (metadata kept).
func withoutField(sc *arrow.Schema, i int) *arrow.Schema {
	md := sc.Metadata()
	return arrow.NewSchema(slices.Delete(slices.Clone(sc.Fields()), i, i+1), &md)
}

// positionCols are rec's position columns.
func positionCols(rec arrow.RecordBatch) (lsn, seq *array.Uint64, err error) {
	sc := rec.Schema()
	li, si := sc.FieldIndices(proto.ColLSN), sc.FieldIndices(proto.ColSeq)
	if len(li) != 1 || len(si) != 1 {
		return nil, nil, fmt.Errorf("%w: batch lacks %s/%s", ErrBadMessage, proto.ColLSN, proto.ColSeq)
	}
	lsn, ok1 := rec.Column(li[0]).(*array.Uint64)
	seq, ok2 := rec.Column(si[0]).(*array.Uint64)
	if !ok1 || !ok2 || rec.NumRows() == 0 {
		return nil, nil, fmt.Errorf("%w: empty batch or system columns of the wrong type", ErrBadMessage)
	}
	return lsn, seq, nil
}

// positions are the first and last position of rows [lo, hi) (lo < hi).
func positions(lsn, seq *array.Uint64, lo, hi int64) (first, last proto.Position) {
	for i := int(lo); i < int(hi); i++ {
		p := proto.Position{LSN: proto.LSN(lsn.Value(i)), Seq: seq.Value(i)}
		if i == int(lo) || p.Less(first) {
			first = p
		}
		if i == int(lo) || last.Less(p) {
			last = p
		}
	}
	return first, last
}

// internSchema returns the schema the slices of earlier messages of
// fingerprint fp used when it equals sc, so that slices of different
// messages compare by identity (sameSchema) when the committer groups
// thousands of them into segments; else it remembers sc.
func (m *Manager) internSchema(fp string, sc *arrow.Schema) *arrow.Schema {
	m.schemaMu.Lock()
	defer m.schemaMu.Unlock()
	if s, ok := m.schemas[fp]; ok && s.Equal(sc) {
		return s
	}
	if m.schemas == nil || len(m.schemas) >= maxInternedSchemas {
		m.schemas = map[string]*arrow.Schema{}
	}
	m.schemas[fp] = sc
	return sc
}

// maxInternedSchemas bounds internSchema's map (it starts over when full).
const maxInternedSchemas = 1024

// receiveItems gives the core every slice of one message, under one hold
// of the lock, and acks or naks the message as the core resolves it. gen
// is the failure generation read before the fetch that returned it (the
// read epoch).
func (m *Manager) receiveItems(p *part, its []*item, gen uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.c.Lost() {
		for _, it := range its {
			it.release() // not acked: redelivers to the new owner
		}
		return
	}
	m.checkDeadlineLocked(p)
	var res core.Resolved[*item]
	for _, it := range its {
		d := m.destLocked(p, it.dest)
		v, rs := d.c.Receive(it, gen, func() core.Verdict { return m.lifecycleReceiveLocked(d, it) })
		res.Ack, res.Nak = append(res.Ack, rs.Ack...), append(res.Nak, rs.Nak...)
		if v != core.Buffer {
			it.release()
		}
		switch v {
		case core.Buffer:
			m.bufferedLocked(p, d, it)
		case core.NakHalted:
			it.m.delay = max(it.m.delay, m.ackWait/2)
		case core.NakEpoch, core.NakExpired:
			// The fetch raced a failed flush of this destination, or came
			// past the local lease deadline (another replica may own the
			// partition now): discarded as if never read, kept pending as
			// nak'd by the core; the message redelivers.
			m.m.discarded.Inc()
		}
	}
	m.resolveLocked(res)
}

// bufferedLocked accounts a slice the core buffered in d.
func (m *Manager) bufferedLocked(p *part, d *dest, it *item) {
	if it.delivered > 1 {
		m.m.redelivered.Inc()
	}
	it.d = d
	d.idleSince = time.Time{}
	if len(d.c.Live()) == 1 {
		d.liveSince = time.Now()
		m.bufferStartedLocked(d)
	}
	d.liveRows += it.rows
	d.liveBytes += it.bytes
	m.totalRows += it.rows
	m.totalBytes += it.bytes
	if it.m.buffered == 0 {
		p.held++ // messages, as the consumer's max_ack_pending counts them
		m.held[it.m] = struct{}{}
	}
	it.m.buffered++
	switch {
	case d.liveRows >= m.rowsTarget:
		m.enqueueLocked(d, "rows")
	case d.liveBytes >= int64(m.dc.FlushBytes):
		m.enqueueLocked(d, "bytes")
	case m.firstFlushLocked(d):
		if !settling(p, time.Now()) {
			m.enqueueLocked(d, "first")
		}
		m.overdueLocked(d) // not queued (settling, say): the interval trigger re-checks it
	}
}

// resolveLocked acks or naks, once each, the messages the core resolved:
// acked when every slice is committed or retired, nak'd (with the longest
// delay any of its slices asked for) when one was nak'd.
func (m *Manager) resolveLocked(res core.Resolved[*item]) {
	for _, it := range res.Ack {
		if !it.m.done {
			it.m.done = true
			_ = it.m.msg.Ack()
		}
	}
	for _, it := range res.Nak {
		if it.m.done {
			continue
		}
		it.m.done = true
		if it.m.delay > 0 {
			_ = it.m.msg.NakWithDelay(it.m.delay)
		} else {
			_ = it.m.msg.Nak()
		}
	}
}

// bytesPerMsgLocked is the counted size of a buffered message: the buffered
// average, or a one-row guess before anything is buffered.
func (m *Manager) bytesPerMsgLocked() int64 {
	var n int64
	for _, p := range m.parts {
		n += int64(p.held)
	}
	if n == 0 || m.totalBytes <= 0 {
		return msgOverhead
	}
	return max(m.totalBytes/n, 1)
}

func (m *Manager) destLocked(p *part, name string) *dest {
	if d, ok := p.dests[name]; ok {
		return d
	}
	d := &dest{name: name, part: p, c: p.c.Dest(name), lc: m.lc.Get(name)}
	p.dests[name] = d
	m.dests[name] = d
	return d
}

// deadLetter settles a message that cannot be parsed as permanent: its
// dead letter stored, then terminated (naked with backoff if storing
// failed).
func (m *Manager) deadLetter(ctx context.Context, msg jetstream.Msg, reason error) {
	if m.settler.Settle(ctx, msg, natsx.Permanent(reason)) == natsx.OutcomeTerm {
		m.m.deadLetters.Inc()
	}
}
