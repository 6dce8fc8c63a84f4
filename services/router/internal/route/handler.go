package route

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/router/internal/split"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/natsotel"
	"github.com/sluice-cdc/sluice/shared/natsx"
)

// TracerName is the instrumentation name of the router's spans.
const TracerName = "github.com/sluice-cdc/sluice/services/router"

const (
	defaultWindow       = 256
	defaultDrainTimeout = 30 * time.Second
)

// Options configure a Handler.
type Options struct {
	JS         jetstream.JetStream
	DLQ        *natsx.DeadLetter
	Splitter   *split.Splitter
	DecodeMem  memory.Allocator // input batches; nil: the Go allocator
	Partitions int              // delivery.partitions
	MaxPayload int              // largest message, headers included (nats.max_payload)
	// Window bounds the publishes of one batch awaiting their PubAck
	// (default 256); JetStream's own async limit is shared by all handlers.
	Window int
	// EncodeWorkers bounds the parts of one batch encoded at once
	// (default GOMAXPROCS).
	EncodeWorkers int
	// DrainTimeout bounds finishing a batch once it started publishing,
	// even after the consume context ended (default 30s).
	DrainTimeout time.Duration
	Log          *slog.Logger
	Metrics      prometheus.Registerer

	// AfterAck, when set, runs after each PubAck with the number of outputs
	// stored so far and the total; an error aborts the batch (no ack).
	// Tests use it to kill a replica mid-batch.
	AfterAck func(ctx context.Context, inputID string, stored, total int) error
	// Retired, when set, names destinations whose rows are dropped after
	// the split (an operator retired them: `sluice destinations retire`);
	// they are counted, never dead-lettered. It is called once per part
	// and must be cheap (state.DestinationCache is lock-free).
	Retired func(destination string) bool
	// UnsafeAckFirst acks the input before publishing its outputs. It breaks
	// "no acknowledged change is lost" and exists only for the negative
	// control of the crash test.
	UnsafeAckFirst bool
}

// Handler routes CHANGES messages. Safe for concurrent use by several
// consume loops.
type Handler struct {
	o      Options
	log    *slog.Logger
	m      *metrics
	tracer trace.Tracer

	batches, rows, deadRows, deadLetters, dropped, mutations, published atomic.Int64
	retiredRows                                                         atomic.Int64

	mu      sync.Mutex // guards seen, lastErr, lastErrAt
	seen    *distinct
	lastErr string
	lastAt  time.Time
}

// New returns a Handler.
func New(o Options) *Handler {
	if o.Window <= 0 {
		o.Window = defaultWindow
	}
	if o.EncodeWorkers <= 0 {
		o.EncodeWorkers = runtime.GOMAXPROCS(0)
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = defaultDrainTimeout
	}
	if o.DecodeMem == nil {
		o.DecodeMem = memory.NewGoAllocator()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Handler{
		o:      o,
		log:    o.Log,
		m:      newMetrics(o.Metrics),
		tracer: otel.Tracer(TracerName),
		seen:   newDistinct(),
	}
}

// Stats is what the handler has done since it started.
type Stats struct {
	Batches        int64     `json:"batches"`
	Rows           int64     `json:"rows"`
	Destinations   int       `json:"destinations_seen"` // exact up to 4096, then estimated (±2%)
	DeadLetters    int64     `json:"dead_letters"`
	DeadLetterRows int64     `json:"dead_letter_rows"`
	DroppedRows    int64     `json:"dropped_rows"`
	Mutations      int64     `json:"routing_mutations"`
	Published      int64     `json:"published"`
	RetiredRows    int64     `json:"retired_rows"`
	LastError      string    `json:"last_error,omitempty"`
	LastErrorAt    time.Time `json:"last_error_at,omitzero"`
}

// Stats returns a snapshot of the counters.
func (h *Handler) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Stats{
		Batches:        h.batches.Load(),
		Rows:           h.rows.Load(),
		Destinations:   h.seen.count(),
		DeadLetters:    h.deadLetters.Load(),
		DeadLetterRows: h.deadRows.Load(),
		DroppedRows:    h.dropped.Load(),
		Mutations:      h.mutations.Load(),
		Published:      h.published.Load(),
		RetiredRows:    h.retiredRows.Load(),
		LastError:      h.lastErr,
		LastErrorAt:    h.lastAt,
	}
}

// Handle routes one message; it is a natsx.Handler.
func (h *Handler) Handle(ctx context.Context, msg jetstream.Msg) error {
	if msg.Subject() == proto.SubjectTick {
		h.m.batches.WithLabelValues(OutcomeTick).Inc()
		return nil
	}
	start := time.Now()
	err := h.route(ctx, msg)
	h.m.batchSeconds.Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		h.m.batches.WithLabelValues(OutcomeRouted).Inc()
		h.batches.Add(1)
	case natsx.IsPermanent(err):
		h.m.batches.WithLabelValues(OutcomePermanent).Inc()
		h.failed(err)
	default:
		h.m.batches.WithLabelValues(OutcomeFailed).Inc()
		h.failed(err)
	}
	return err
}

func (h *Handler) failed(err error) {
	h.mu.Lock()
	h.lastErr, h.lastAt = err.Error(), time.Now()
	h.mu.Unlock()
}

// inputID names the input for output ids: its Nats-Msg-Id, else its place
// in the stream (stable across redeliveries).
func inputID(msg jetstream.Msg) (string, error) {
	if id := msg.Headers().Get(proto.HeaderMsgID); id != "" {
		return id, nil
	}
	if meta, err := msg.Metadata(); err == nil {
		return "s:" + meta.Stream + ":" + strconv.FormatUint(meta.Sequence.Stream, 10), nil
	}
	return "", natsx.Permanent(fmt.Errorf("routing %s: %w", msg.Subject(), ErrNoMsgID))
}

func (h *Handler) route(ctx context.Context, msg jetstream.Msg) error {
	hdr := msg.Headers()
	if err := proto.CheckWire(hdr.Get(proto.HeaderWire)); err != nil {
		return natsx.Permanent(fmt.Errorf("routing %s: %w", msg.Subject(), err))
	}
	id, err := inputID(msg)
	if err != nil {
		return err
	}
	// The span is a child of the reader's (from the input headers); the
	// outputs carry it on.
	if sc := trace.SpanContextFromContext(natsotel.Extract(context.Background(), hdr)); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx, span := h.tracer.Start(ctx, "route "+msg.Subject(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", msg.Subject()),
			attribute.String("messaging.message.id", id),
			attribute.String("sluice.table", hdr.Get(proto.HeaderTable)),
		))
	defer span.End()

	rec, err := arrowcodec.Decode(msg.Data(), h.o.DecodeMem)
	if err != nil {
		return natsx.Permanent(fmt.Errorf("decoding batch %s: %w", id, err))
	}
	if tableClear(rec) {
		if err := h.awaitEarlier(ctx, msg); err != nil {
			rec.Release()
			return err
		}
		return h.routeClear(ctx, id, hdr, rec)
	}
	t0 := time.Now()
	// Ranked by partition (retired destinations last), so each
	// partition's parts are one window of the permuted batch.
	res, err := h.o.Splitter.SplitBy(rec, h.rank)
	h.m.splitSeconds.Observe(time.Since(t0).Seconds())
	rec.Release()
	if err != nil {
		return natsx.Permanent(fmt.Errorf("splitting batch %s: %w", id, err))
	}
	defer res.Release()
	parts, retired := dropRetired(res.Parts) // lifecycle: retired destinations get nothing
	span.SetAttributes(attribute.Int("sluice.destinations", len(parts)), attribute.Int("sluice.rows", res.Rows))

	base := nats.Header{}
	for _, k := range []string{proto.HeaderWire, proto.HeaderTable, proto.HeaderSchema, proto.HeaderClaimBytes} {
		if v := hdr.Get(k); v != "" {
			base.Set(k, v)
		}
	}
	if base.Get(proto.HeaderSchema) == "" && len(parts) > 0 {
		base.Set(proto.HeaderSchema, arrowcodec.Fingerprint(parts[0].Batch.Schema()))
	}
	natsotel.Inject(ctx, base)

	t1 := time.Now()
	msgs, err := h.encodePartitions(id, base, res, parts)
	h.m.encodeSeconds.Observe(time.Since(t1).Seconds())
	if err != nil {
		return err
	}

	// From here the batch finishes even if the consume context ends (a
	// graceful shutdown drains), bounded by DrainTimeout.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.o.DrainTimeout)
	defer cancel()
	if h.o.UnsafeAckFirst {
		_ = msg.Ack()
	}
	if res.Unroutable != nil {
		if err := h.deadLetter(pctx, msg, id, base, res); err != nil {
			return err
		}
	}
	if err := h.publish(pctx, id, msgs); err != nil {
		return err
	}

	h.rows.Add(int64(res.Rows))
	h.m.rows.Add(float64(res.Rows))
	h.m.dests.Observe(float64(len(parts)))
	h.m.msgsPerBatch.Observe(float64(len(msgs)))
	h.mutations.Add(int64(res.Mutations))
	h.m.mutations.Add(float64(res.Mutations))
	h.m.moveOuts.Add(float64(res.MoveOuts))
	h.dropped.Add(int64(res.Dropped))
	h.m.dropped.Add(float64(res.Dropped))
	h.retiredRows.Add(retired)
	h.m.retired.Add(float64(retired))
	h.mu.Lock()
	for _, p := range parts {
		h.seen.add(p.Destination)
	}
	h.mu.Unlock()
	return nil
}

// routeClear publishes a table-wide clear to every partition
// (clearMessages) and returns once every one is stored; rec is released.
func (h *Handler) routeClear(ctx context.Context, id string, hdr nats.Header, rec arrow.RecordBatch) error {
	defer rec.Release()
	base := nats.Header{}
	for _, k := range []string{proto.HeaderWire, proto.HeaderTable, proto.HeaderSchema} {
		if v := hdr.Get(k); v != "" {
			base.Set(k, v)
		}
	}
	if base.Get(proto.HeaderSchema) == "" {
		base.Set(proto.HeaderSchema, arrowcodec.Fingerprint(rec.Schema()))
	}
	natsotel.Inject(ctx, base)
	msgs, err := h.clearMessages(id, base, rec)
	if err != nil {
		return natsx.Permanent(fmt.Errorf("encoding the clear %s: %w", id, err))
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.o.DrainTimeout)
	defer cancel()
	if err := h.publish(pctx, id, msgs); err != nil {
		return err
	}
	h.rows.Add(1)
	h.m.rows.Add(1)
	h.m.msgsPerBatch.Observe(float64(len(msgs)))
	return nil
}

// deadLetter records the unroutable rows of one batch as one message.
func (h *Handler) deadLetter(ctx context.Context, msg jetstream.Msg, id string, base nats.Header, res *split.Result) error {
	u := res.Unroutable
	body, err := arrowcodec.Encode(u.Batch)
	if err != nil {
		return fmt.Errorf("encoding unroutable rows of %s: %w", id, err)
	}
	hd := maps.Clone(base)
	hd.Set(proto.HeaderFirst, u.First.String())
	hd.Set(proto.HeaderLast, u.Last.String())
	hd.Set(proto.HeaderRows, strconv.FormatInt(u.Batch.NumRows(), 10))
	hd.Set(proto.HeaderMsgID, "u:"+id) // natsx derives the DLQ id from it
	hd.Set(proto.HeaderOrigSubject, msg.Subject())
	if meta, err := msg.Metadata(); err == nil {
		hd.Set(proto.HeaderOrigStream, meta.Stream)
		hd.Set(proto.HeaderOrigSeq, strconv.FormatUint(meta.Sequence.Stream, 10))
	}
	reason := fmt.Errorf("%d unroutable rows: %s", u.Batch.NumRows(), strings.Join(res.Reasons, "; "))
	if err := h.o.DLQ.SendData(ctx, body, hd, reason); err != nil {
		return fmt.Errorf("dead-lettering unroutable rows of %s: %w", id, err)
	}
	h.deadLetters.Add(1)
	h.deadRows.Add(u.Batch.NumRows())
	h.m.deadLetters.Inc()
	h.m.deadRows.Add(float64(u.Batch.NumRows()))
	h.log.WarnContext(ctx, "unroutable rows dead-lettered", "input", id, "rows", u.Batch.NumRows(), "reason", reason.Error())
	return nil
}

// publish sends msgs asynchronously, at most Window awaiting their PubAck
// (a sliding window: the oldest is awaited when it is full), and returns
// once every one is stored.
func (h *Handler) publish(ctx context.Context, id string, msgs []*nats.Msg) error {
	futs := make([]jetstream.PubAckFuture, 0, min(h.o.Window, len(msgs)))
	stored := 0
	await := func(f jetstream.PubAckFuture) error {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publishing batch %s to %s: %w", id, f.Msg().Subject, err)
		case <-ctx.Done():
			return fmt.Errorf("publishing batch %s: waiting for acks: %w", id, ctx.Err())
		}
		stored++
		h.published.Add(1)
		h.m.published.Inc()
		if h.o.AfterAck != nil {
			return h.o.AfterAck(ctx, id, stored, len(msgs))
		}
		return nil
	}
	head := 0
	for _, m := range msgs {
		if len(futs)-head == h.o.Window {
			if err := await(futs[head]); err != nil {
				return err
			}
			futs[head] = nil
			head++
		}
		f, err := h.o.JS.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("publishing batch %s to %s: %w", id, m.Subject, err)
		}
		if head > 0 && len(futs) == cap(futs) {
			n := copy(futs, futs[head:])
			futs, head = futs[:n], 0
		}
		futs = append(futs, f)
	}
	for ; head < len(futs); head++ {
		if err := await(futs[head]); err != nil {
			return err
		}
	}
	return nil
}

// MetricSet exposes some of the handler's collectors to tests.
type MetricSet struct{ Mutations prometheus.Counter }

// Metrics returns the handler's collectors (tests).
func (h *Handler) Metrics() MetricSet { return MetricSet{Mutations: h.m.mutations} }
