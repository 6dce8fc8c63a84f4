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
	Stage string      // reader, router, flusher, indexer, publisher: labels metrics, names the DLQ subject
	DLQ   *DeadLetter // where permanent failures go; nil: they are terminated and logged
	Fetch int         // messages per fetch (default 16)
	// MaxWait is the server-side expiry of one fetch (default 1s); a loop
	// stopping waits at most MaxWait + 1s for its open fetch (see Fetch).
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
	defaultMaxWait    = time.Second
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
	s    *Settler

	// state for logging transitions once, not per message; only the
	// Consume goroutine touches them.
	fetchFailing bool
	panicked     bool
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
	// The settler fills in the stage, the DLQ timeout and the logger.
	s := NewSettler(SettleOptions{Stage: opts.Stage, DLQ: opts.DLQ, DLQTimeout: opts.DLQTimeout, Log: opts.Log, Metrics: opts.Metrics})
	opts.Stage = s.stage
	s.log = s.log.With("stage", s.stage, "consumer", consumerName(cons))
	c := &consumer{cons: cons, h: h, opts: opts, log: s.log, m: s.m, s: s}
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
		batch, err := Fetch(c.cons, c.opts.Fetch, c.opts.MaxWait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			fetchAttempt++
			c.fetchFailed(err)
			if !Sleep(ctx, Backoff(min(fetchAttempt, 6))) {
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
		if berr := FetchErr(batch); berr != nil && ctx.Err() == nil {
			fetchAttempt++
			c.fetchFailed(berr)
			if !Sleep(ctx, Backoff(min(fetchAttempt, 6))) {
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
	if err == nil && c.opts.ManualAck {
		err = ErrManualAck
	}
	outcome := c.s.Settle(hctx, msg, err)
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

// Delivered returns how many times msg has been delivered (1 when unknown).
func Delivered(msg jetstream.Msg) uint64 {
	if meta, err := msg.Metadata(); err == nil {
		return meta.NumDelivered
	}
	return 1
}
