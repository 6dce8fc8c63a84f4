package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/natsotel"
)

// Handler processes one message. ctx carries the trace context extracted
// from the message headers (and the consume span).
type Handler func(ctx context.Context, msg jetstream.Msg) error

// ConsumeOptions configure Consume.
type ConsumeOptions struct {
	Stage   string      // reader, router, flusher, indexer, publisher: labels metrics, names the DLQ subject
	DLQ     *DeadLetter // where permanent failures go; nil: they are terminated and logged
	Fetch   int         // messages per fetch (default 16)
	MaxWait time.Duration
	// ManualAck: a nil handler error does not ack; the handler acks later.
	ManualAck bool
	Log       *slog.Logger
	Metrics   prometheus.Registerer
	// InProgressEvery > 0 sends msg.InProgress() at this interval while a
	// handler runs (keep it well under the consumer's AckWait).
	InProgressEvery time.Duration
	// DLQTimeout bounds recording one dead letter (default 10s); when it
	// fails the message is naked instead of terminated.
	DLQTimeout time.Duration
}

const (
	defaultFetch      = 16
	defaultMaxWait    = 5 * time.Second
	defaultDLQTimeout = 10 * time.Second
)

// unsafeTermOnDLQFailure switches off the rule "terminate a permanent
// failure only after its dead letter is stored". Only the negative-control
// test sets it.
var unsafeTermOnDLQFailure = false

// TracerName is the instrumentation name of natsx spans.
const TracerName = "github.com/sluice-cdc/sluice/shared/natsx"

type consumer struct {
	cons jetstream.Consumer
	h    Handler
	opts ConsumeOptions
	log  *slog.Logger
	m    *consumeMetrics

	// state for logging transitions once, not per message; only the
	// Consume goroutine touches them.
	failing      bool
	fetchFailing bool
	panicked     bool
	ackFailing   bool
}

// Consume pulls messages from cons and runs h on each, one at a time, until
// ctx ends; it then returns nil. See the package doc for how handler errors
// map to acks. Messages fetched but not handled when ctx ends are naked.
func Consume(ctx context.Context, cons jetstream.Consumer, h Handler, opts ConsumeOptions) error {
	if cons == nil || h == nil {
		return errors.New("consuming: nil consumer or handler")
	}
	if opts.Fetch <= 0 {
		opts.Fetch = defaultFetch
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = defaultMaxWait
	}
	if opts.DLQTimeout <= 0 {
		opts.DLQTimeout = defaultDLQTimeout
	}
	if opts.Stage == "" {
		opts.Stage = "unknown"
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	c := &consumer{
		cons: cons, h: h, opts: opts,
		log: log.With("stage", opts.Stage, "consumer", consumerName(cons)),
		m:   newConsumeMetrics(opts.Metrics),
	}
	c.run(ctx)
	return nil
}

func consumerName(cons jetstream.Consumer) string {
	if ci := cons.CachedInfo(); ci != nil {
		return ci.Name
	}
	return ""
}

func (c *consumer) run(ctx context.Context) {
	fetchAttempt := 0
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, c.opts.MaxWait)
		batch, err := c.cons.Fetch(c.opts.Fetch, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return
			}
			fetchAttempt++
			c.fetchFailed(err)
			if !sleep(ctx, Backoff(min(fetchAttempt, 6))) {
				return
			}
			continue
		}
		for msg := range batch.Messages() {
			if ctx.Err() != nil {
				_ = msg.Nak()
				c.m.messages.WithLabelValues(c.opts.Stage, OutcomeNak).Inc()
				continue
			}
			c.handle(ctx, msg)
		}
		berr := batch.Error()
		cancel()
		if berr != nil && ctx.Err() == nil && !errors.Is(berr, context.DeadlineExceeded) &&
			!errors.Is(berr, context.Canceled) && !errors.Is(berr, jetstream.ErrNoMessages) {
			fetchAttempt++
			c.fetchFailed(berr)
			if !sleep(ctx, Backoff(min(fetchAttempt, 6))) {
				return
			}
			continue
		}
		if fetchAttempt > 0 || c.fetchFailing {
			if c.fetchFailing {
				c.log.Info("fetching recovered")
			}
			c.fetchFailing = false
			fetchAttempt = 0
		}
	}
}

func (c *consumer) fetchFailed(err error) {
	c.m.fetchErrors.WithLabelValues(c.opts.Stage).Inc()
	if !c.fetchFailing {
		c.fetchFailing = true
		c.log.Warn("fetching messages failing; retrying with backoff (logged once)", "error", err)
	}
}

func (c *consumer) handle(ctx context.Context, msg jetstream.Msg) {
	var (
		delivered uint64 = 1
		stream    string
		seq       uint64
	)
	meta, merr := msg.Metadata()
	if merr == nil {
		delivered, stream, seq = meta.NumDelivered, meta.Stream, meta.Sequence.Stream
	}
	hctx := natsotel.Extract(ctx, msg.Headers())
	hctx, span := otel.Tracer(TracerName).Start(hctx, "process "+c.opts.Stage,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", msg.Subject()),
			attribute.String("messaging.consumer.group.name", consumerName(c.cons)),
			attribute.String("messaging.message.id", msg.Headers().Get(proto.HeaderMsgID)),
			attribute.String("sluice.stream", stream),
			attribute.Int64("sluice.stream_seq", int64(seq)),
			attribute.Int64("sluice.delivered", int64(delivered)),
		))
	defer span.End()

	start := time.Now()
	err := c.call(hctx, msg)
	c.m.duration.WithLabelValues(c.opts.Stage).Observe(time.Since(start).Seconds())
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	outcome := c.settle(ctx, hctx, msg, err, delivered, stream, seq)
	span.SetAttributes(attribute.String("sluice.outcome", outcome))
}

// call checks the wire version and runs the handler, recovering panics and
// keeping the message alive with in-progress acks.
func (c *consumer) call(ctx context.Context, msg jetstream.Msg) (err error) {
	if v := msg.Headers().Get(proto.HeaderWire); v != "" {
		if werr := proto.CheckWire(v); werr != nil {
			return Permanent(fmt.Errorf("checking wire version of %s: %w", msg.Subject(), werr))
		}
	}
	if every := c.opts.InProgressEvery; every > 0 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					_ = msg.InProgress()
				case <-stop:
					return
				}
			}
		}()
		defer func() { close(stop); wg.Wait() }()
	}
	defer func() {
		if r := recover(); r != nil {
			err = Permanent(fmt.Errorf("%w: %v", ErrPanic, r))
			if !c.panicked {
				c.panicked = true
				c.log.ErrorContext(ctx, "handler panicked; message dead-lettered (stack logged once per loop)",
					"subject", msg.Subject(), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			} else {
				c.log.ErrorContext(ctx, "handler panicked; message dead-lettered", "subject", msg.Subject(), "panic", fmt.Sprint(r))
			}
		}
	}()
	return c.h(ctx, msg)
}

// settle applies the classifier and returns the outcome.
func (c *consumer) settle(ctx, hctx context.Context, msg jetstream.Msg, err error, delivered uint64, stream string, seq uint64) string {
	count := func(o string) string {
		c.m.messages.WithLabelValues(c.opts.Stage, o).Inc()
		return o
	}
	switch {
	case err == nil && c.opts.ManualAck, errors.Is(err, ErrManualAck):
		c.recovered()
		return count(OutcomeManual)
	case err == nil:
		c.recovered()
		if aerr := msg.Ack(); aerr != nil {
			c.ackFailed(aerr)
		}
		return count(OutcomeAck)
	case ctx.Err() != nil:
		// Shutting down: hand the message back for prompt redelivery.
		_ = msg.Nak()
		return count(OutcomeNak)
	case IsPermanent(err):
		reason := HeaderValue(err.Error(), MaxReasonLen)
		if c.opts.DLQ != nil {
			dctx, cancel := context.WithTimeout(ctx, c.opts.DLQTimeout)
			derr := c.opts.DLQ.Send(dctx, msg, err)
			cancel()
			if derr != nil && !unsafeTermOnDLQFailure {
				c.transient(hctx, msg, fmt.Errorf("%w (while handling permanent error: %v)", derr, err))
				_ = msg.NakWithDelay(Backoff(int(min(delivered, 30))))
				return count(OutcomeNak)
			}
			count(OutcomeDLQ)
			c.log.WarnContext(hctx, "message dead-lettered", "subject", msg.Subject(),
				"stream", stream, "seq", seq, "dlq", proto.DLQSubject(c.opts.DLQ.Stage()), "reason", reason)
		} else {
			c.log.ErrorContext(hctx, "permanent failure without a dead-letter stream; terminating message",
				"subject", msg.Subject(), "stream", stream, "seq", seq, "reason", reason)
		}
		if terr := msg.TermWithReason(reason); terr != nil {
			c.ackFailed(terr)
		}
		return count(OutcomeTerm)
	default:
		c.transient(hctx, msg, err)
		_ = msg.NakWithDelay(Backoff(int(min(delivered, 30))))
		return count(OutcomeNak)
	}
}

func (c *consumer) transient(ctx context.Context, msg jetstream.Msg, err error) {
	if !c.failing {
		c.failing = true
		c.log.WarnContext(ctx, "handler failing; naking with backoff (logged once until it recovers)",
			"subject", msg.Subject(), "error", err)
	}
}

func (c *consumer) recovered() {
	if c.failing {
		c.failing = false
		c.log.Info("handler recovered")
	}
	c.ackFailing = false
}

func (c *consumer) ackFailed(err error) {
	if !c.ackFailing {
		c.ackFailing = true
		c.log.Warn("acking failed (logged once); the message will be redelivered", "error", err)
	}
}

// Delivered returns how many times msg has been delivered (1 when unknown).
func Delivered(msg jetstream.Msg) uint64 {
	if meta, err := msg.Metadata(); err == nil {
		return meta.NumDelivered
	}
	return 1
}
