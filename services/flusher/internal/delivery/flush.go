package delivery

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
	"github.com/sluice-cdc/sluice/services/flusher/internal/resolve"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/natsotel"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/pgtypes"
	"github.com/sluice-cdc/sluice/shared/state"
)

// maxAttempts bounds the retries of one flush step before the flush fails
// for good (and the destination rewinds).
const maxAttempts = 5

// flushJob is one swapped-out buffer in flight. A job cannot exist without
// the lease term and epoch it was started under.
type flushJob struct {
	d       *dest
	f       *core.Flush[*item] // its items, term, epoch and next step
	lease   state.Lease
	started time.Time

	// Set when the flush starts (beginFlush) and by group commit.
	ctx   context.Context
	span  trace.Span
	rows  int64
	parts []resolvedPart // resolved on a worker, for the committer's segments
	// heldBytes (of parts) are counted in Manager.totalBytes.
	heldBytes int64
}

// startFlushLocked swaps d's live buffer out into a job.
func (m *Manager) startFlushLocked(d *dest) *flushJob {
	if m.heldLocked(d) { // held: lifecycle.go
		return nil
	}
	f := d.c.StartFlush()
	if f == nil {
		return nil
	}
	d.liveRows, d.liveBytes = 0, 0
	return &flushJob{d: d, f: f, lease: d.part.lease, started: time.Now()}
}

// permanentErr marks a failure retrying cannot fix: the destination halts.
type permanentErr struct{ error }

func (e permanentErr) Unwrap() error { return e.error }

func isPermanent(err error) bool {
	var p permanentErr
	return errors.As(err, &p)
}

// retry runs f until it succeeds, fails permanently, the lease is lost or
// maxAttempts is reached.
func retry(ctx context.Context, what string, f func() error) error {
	var err error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if err = f(); err == nil || isPermanent(err) || errors.Is(err, state.ErrLeaseLost) || errors.Is(err, ErrPartitionLost) {
			return err
		}
		if attempt == maxAttempts {
			break
		}
		if !natsx.Sleep(ctx, natsx.Backoff(attempt)) {
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		}
	}
	return fmt.Errorf("%s: giving up after %d attempts: %w", what, maxAttempts, err)
}

// runFlush performs job's steps in the order the core gives them (write
// the segments, advance the cursor, publish the segment events, check the
// lease and ack), one flush at a time: the path without group commit. Its
// segments hold its destination alone. Any failure rewinds the
// destination.
func (m *Manager) runFlush(ctx context.Context, job *flushJob) {
	ctx = m.beginFlush(ctx, job)
	var packs []*segOut
	var err error
	for err == nil {
		switch job.f.Next() {
		case core.StepWrite:
			if packs, err = m.writeAlone(ctx, job); err == nil {
				err = m.stepDone(job, core.StepWrite)
			}
		case core.StepCursor:
			err = m.advance(ctx, job)
		case core.StepPublish:
			if err = m.publishEvents(ctx, job, packs); err == nil {
				err = m.stepDone(job, core.StepPublish)
			}
		case core.StepAck:
			if !m.noAckFence {
				err = m.checkLease(ctx, job)
			}
			if err == nil {
				err = m.commit(job, packs)
			}
		case core.StepDone:
			m.endFlush(job, nil)
			return
		}
	}
	m.endFlush(job, err)
}

// stepDone tells the core a step of job is complete.
func (m *Manager) stepDone(job *flushJob, s core.Step) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return stepErr(job, s, job.f.Done(s))
}

// stepErr wraps the core's refusal of step s of job.
func stepErr(job *flushJob, s core.Step, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, core.ErrLost):
		return fmt.Errorf("flushing %s: %s: %w", job.d.name, s, ErrPartitionLost)
	}
	return fmt.Errorf("flushing %s: %s: %w", job.d.name, s, err)
}

// beginFlush starts job's span (linked to every input batch's span) and
// returns its context. One span per destination flush: its links and
// attributes are made only when it records (a process that exports
// nowhere samples nothing, telemetry.Setup), its constant attributes once
// (flushAttrs), the partition's subject once per claim (part.subject).
func (m *Manager) beginFlush(ctx context.Context, job *flushJob) context.Context {
	d := job.d
	var rows int64
	for _, it := range job.f.Items {
		rows += it.rows
	}
	job.rows = rows
	ctx, job.span = tracer.Start(ctx, "flusher.flush")
	job.ctx = ctx
	if !job.span.IsRecording() {
		return ctx
	}
	for _, it := range job.f.Items {
		if it.m.link.SpanContext.IsValid() {
			job.span.AddLink(it.m.link)
		}
	}
	job.span.SetAttributes(flushAttrs[0], flushAttrs[1],
		attribute.String("messaging.destination.name", d.part.subject),
		attribute.String("sluice.destination", d.name),
		attribute.Int("sluice.partition", d.part.id),
		attribute.Int("sluice.messages", len(job.f.Items)),
		attribute.Int64("sluice.rows", rows))
	return ctx
}

// flushAttrs are the attributes every flush span has.
var flushAttrs = [...]attribute.KeyValue{
	attribute.String("messaging.system", "nats"),
	attribute.String("messaging.operation.type", "process"),
}

// endFlush ends job: on error it applies the failure rule.
func (m *Manager) endFlush(job *flushJob, err error) {
	sp := job.span
	defer sp.End()
	dur := time.Since(job.started)
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
		m.fail(job, err)
		m.m.flushes.WithLabelValues("failed").Inc()
		return
	}
	m.m.flushes.WithLabelValues("ok").Inc()
	m.m.flushDuration.Observe(dur.Seconds())
	m.m.flushedRows.Add(float64(job.rows))
	m.adaptRows(job.rows, dur)
}

// writeAlone resolves job and writes its segments, holding its
// destination alone.
func (m *Manager) writeAlone(ctx context.Context, job *flushJob) ([]*segOut, error) {
	parts, _, err := m.resolveParts(job)
	if err != nil {
		return nil, err
	}
	defer releaseParts(parts)
	return m.ownSegments(ctx, job, parts)
}

// inlineClaims reads the values rec carries by reference from the pack
// store. A missing object or a malformed reference is permanent; a store
// error is retried by the flush's failure path.
func (m *Manager) inlineClaims(ctx context.Context, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	cs, ok := m.store.(packstore.ClaimStore)
	if !ok {
		return nil, permanentErr{fmt.Errorf("batch carries values by reference, which the pack store %T cannot hold", m.store)}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	out, err := resolve.InlineClaims(ctx, m.mem, rec, cs.GetClaim, pgtypes.AppendText)
	if errors.Is(err, resolve.ErrClaim) || errors.Is(err, resolve.ErrSchema) {
		return nil, permanentErr{err}
	}
	return out, err
}

func (m *Manager) advance(ctx context.Context, job *flushJob) error {
	d := job.d
	m.mu.Lock()
	target, ok := d.c.CursorTarget(job.f)
	if !ok && needsRegistration(d) {
		target, ok = proto.Position{}, true // registered (clear.go)
	}
	if !ok {
		// Not settled (a message pending elsewhere may sit below the
		// target; a later flush advances the cursor), or nothing to write.
		m.mu.Unlock()
		return m.stepDone(job, core.StepCursor)
	}
	m.mu.Unlock()
	err := retry(ctx, "advancing cursor "+d.name, func() error {
		if m.advanceFault != nil {
			if err := m.advanceFault(d.name); err != nil {
				return err
			}
		}
		_, err := m.cursors.Advance(ctx, job.lease, d.name, d.part.id, target)
		return err
	})
	if errors.Is(err, state.ErrLeaseLost) {
		m.partitionLost(d.part, job.lease)
		return fmt.Errorf("advancing cursor %s: %w: %v", d.name, ErrPartitionLost, err)
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	d.registered = true
	err = d.c.CursorWritten(job.f, target)
	m.mu.Unlock()
	if err != nil {
		return stepErr(job, core.StepCursor, err)
	}
	if m.afterAdvance != nil {
		m.afterAdvance(d.name, target)
	}
	return nil
}

// publishEvents publishes the event of every segment of packs, one at a
// time with retries.
func (m *Manager) publishEvents(ctx context.Context, job *flushJob, packs []*segOut) error {
	for _, o := range packs {
		msg, err := m.packEvent(ctx, o)
		if err != nil {
			return err
		}
		err = retry(ctx, "publishing segment event "+o.meta.PackID, func() error {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := natsx.PublishSync(pctx, m.js, msg)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// packEvent builds the PACKS event of segment o, carrying ctx's trace: on
// proto.SegmentEventSubject(table), one row per destination the segment
// holds (proto.PackEventSchema), in row order.
func (m *Manager) packEvent(ctx context.Context, o *segOut) (*nats.Msg, error) {
	mt := o.meta
	b := array.NewRecordBuilder(m.mem, proto.PackEventSchema)
	var rows int64
	first, last := "", ""
	var lo, hi proto.Position
	for k, e := range o.entries {
		for i, v := range []string{mt.PackID, mt.StoreID, e.Destination, mt.Table, o.path, mt.Schema, e.First, e.Last} {
			b.Field(i).(*array.StringBuilder).Append(v)
		}
		b.Field(8).(*array.Int64Builder).Append(e.Rows)
		b.Field(9).(*array.Int64Builder).Append(e.Tombstones)
		b.Field(10).(*array.Int64Builder).Append(o.bytes)
		rows += e.Rows
		f, err1 := proto.ParsePosition(e.First)
		l, err2 := proto.ParsePosition(e.Last)
		if err1 != nil || err2 != nil {
			b.Release()
			return nil, permanentErr{fmt.Errorf("encoding segment event %s: entry %s positions %q, %q", mt.PackID, e.Destination, e.First, e.Last)}
		}
		if k == 0 || f.Less(lo) {
			lo, first = f, e.First
		}
		if k == 0 || hi.Less(l) {
			hi, last = l, e.Last
		}
	}
	rec := b.NewRecordBatch()
	b.Release()
	// A segment's event repeats its pack id, path, table and schema on every
	// row: compressed, a 4,096-destination event is a few hundred KiB at most.
	// LZ4, not zstd: arrow-go makes a new compressor for every message, and
	// a new zstd encoder allocates its 8 MiB window's history (16 MiB) on
	// first use — tens of MiB of garbage a second at 10,000 tenants — where
	// lz4 takes its blocks from a pool; the repeated columns compress about
	// as well.
	c := arrowcodec.None
	if len(o.entries) >= compressEventsFrom {
		c = arrowcodec.LZ4
	}
	body, err := arrowcodec.EncodeWith(rec, c)
	rec.Release()
	if err != nil {
		return nil, permanentErr{fmt.Errorf("encoding segment event %s: %w", mt.PackID, err)}
	}
	h := nats.Header{}
	h.Set(proto.HeaderWire, proto.WireVersion)
	h.Set(proto.HeaderTable, mt.Table)
	h.Set(proto.HeaderSchema, mt.Schema)
	h.Set(proto.HeaderFirst, first)
	h.Set(proto.HeaderLast, last)
	h.Set(proto.HeaderRows, strconv.FormatInt(rows, 10))
	h.Set(proto.HeaderMsgID, proto.PackMsgID(mt.PackID))
	natsotel.Inject(ctx, h)
	return &nats.Msg{Subject: proto.SegmentEventSubject(mt.Table), Header: h, Data: body}, nil
}

// checkLease asks the state database, right before acking, whether the
// job's lease (holder and term) is still live by the server clock.
func (m *Manager) checkLease(ctx context.Context, job *flushJob) error {
	if m.beforeAck != nil {
		m.beforeAck(job.d.name)
	}
	l := job.lease
	var live bool
	err := retry(ctx, "checking lease "+l.Name, func() (err error) {
		live, err = m.leases.Held(ctx, l)
		return err
	})
	if err != nil {
		return err
	}
	if !live {
		m.partitionLost(job.d.part, l)
		return fmt.Errorf("acking flush of %s: %w (term %d)", job.d.name, ErrPartitionLost, l.Term)
	}
	return nil
}

// commit acks the job's messages if, and only if, the partition lease the
// job started under is still the one held.
func (m *Manager) commit(job *flushJob, packs []*segOut) error {
	if m.noAckFence && m.beforeAck != nil {
		m.beforeAck(job.d.name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.commitLocked(job, packs)
}

// commitLocked is commit with m.mu held (a group commit acks its whole
// group under one lock).
func (m *Manager) commitLocked(job *flushJob, packs []*segOut) error {
	d := job.d
	// The lease check passed right before (checkLease, checkLeases); the
	// core fences on the lease term the flush started under.
	res, ok, err := d.c.Commit(job.f, true)
	if err != nil {
		return fmt.Errorf("acking flush of %s: %w", d.name, err)
	}
	if !ok {
		return fmt.Errorf("acking flush of %s: %w", d.name, ErrPartitionLost)
	}
	for _, it := range job.f.Items {
		m.releaseItemLocked(it)
	}
	// Acks the messages whose every slice is now committed (naks those
	// another destination nak'd).
	m.resolveLocked(res)
	if len(packs) > 0 {
		d.lastPack = packs[len(packs)-1].meta.PackID
	}
	d.lastErr = ""
	d.lastOK = time.Now()
	// Messages that arrived during the flush may already be due.
	if len(d.c.Live()) > 0 && (d.liveRows >= m.rowsTarget || d.liveBytes >= int64(m.dc.FlushBytes) || time.Since(d.liveSince) >= m.dc.FlushInterval || m.flushNowLocked(d)) {
		m.enqueueLocked(d, "backlog")
		m.overdueLocked(d) // not queued (held, say): the interval trigger re-checks it
	}
	return nil
}

// fail applies the core's flush-failure rule (core.Dest.Fail): the
// in-flight and the live buffer are discarded and nak'd (their ranges stay
// pending until redelivered), the epoch bumped, and the destination halted
// on a permanent failure.
func (m *Manager) fail(job *flushJob, err error) {
	d := job.d
	m.mu.Lock()
	defer m.mu.Unlock()
	d.lastErr = err.Error()
	victims, nak, res := d.c.Fail(job.f, isPermanent(err), errors.Is(err, ErrPartitionLost))
	if len(d.c.Live()) == 0 {
		d.liveRows, d.liveBytes = 0, 0
	} else {
		m.overdueLocked(d) // a buffer left live: the interval trigger re-checks it
	}
	delay := natsx.Backoff(3)
	if isPermanent(err) {
		delay = m.ackWait / 2
	}
	for _, it := range victims {
		if nak {
			it.m.delay = max(it.m.delay, delay)
		}
		m.releaseItemLocked(it)
	}
	// Naks the messages whose other slices are resolved too; the others
	// are nak'd when they are.
	m.resolveLocked(res)
	if !nak {
		return
	}
	if isPermanent(err) {
		d.haltErr = err
		m.log.Error("destination halted", "destination", d.name, "error", err)
	} else {
		m.log.Warn("flush failed; destination rewound to its cursor", "destination", d.name, "cursor", d.c.Cursor(), "error", err)
	}
}

// adaptRows moves the rows target towards what flushes in about a quarter
// of the flush interval (at most 5s), within [1000, delivery.flush_rows].
func (m *Manager) adaptRows(rows int64, dur time.Duration) {
	if rows < 1000 || dur <= 0 {
		return
	}
	goal := min(m.dc.FlushInterval/4, 5*time.Second)
	want := int64(float64(rows) / dur.Seconds() * goal.Seconds())
	want = min(max(want, 1000), int64(m.dc.FlushRows))
	m.mu.Lock()
	m.rowsTarget = (m.rowsTarget*7 + want) / 8
	m.mu.Unlock()
}
