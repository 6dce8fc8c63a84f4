package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
)

// SettleOptions configure a Settler.
type SettleOptions struct {
	Stage string      // labels metrics and log records
	DLQ   *DeadLetter // where permanent failures go; nil: they are terminated and logged
	// DLQTimeout bounds recording one dead letter (default 10s); when it
	// fails the message is naked instead of terminated.
	DLQTimeout time.Duration
	Log        *slog.Logger
	// Metrics registers sluice_consume_messages_total (and the consume
	// loop's other collectors); nil: outcomes are not counted.
	Metrics prometheus.Registerer
}

// Settler is the one error classifier: it maps a handler's result for one
// message to its JetStream action (see the package doc's table). Consume
// settles every message through one; a stage that acks messages itself
// (the flusher's fetch loop, the indexer's batches) settles its failures
// through its own, so every stage cleans and caps the reason, bounds the
// dead-letter publish, backs off its naks and logs a failing run once.
// A Settler is safe for concurrent use.
type Settler struct {
	stage      string
	dlq        *DeadLetter
	dlqTimeout time.Duration
	log        *slog.Logger
	m          *consumeMetrics

	// failing and ackFailing make each run of failures log once, not once
	// per message.
	failing    atomic.Bool
	ackFailing atomic.Bool
}

// NewSettler returns the classifier of one stage.
func NewSettler(o SettleOptions) *Settler {
	if o.DLQTimeout <= 0 {
		o.DLQTimeout = defaultDLQTimeout
	}
	if o.Stage == "" {
		o.Stage = "unknown"
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	return &Settler{
		stage: o.Stage, dlq: o.DLQ, dlqTimeout: o.DLQTimeout,
		log: log, m: newConsumeMetrics(o.Metrics),
	}
}

// Settle applies the classifier to msg, whose handling returned err, and
// returns the outcome (OutcomeAck, OutcomeManual, OutcomeNak, OutcomeTerm).
// ctx is the handling context: when it has ended the message is naked for
// prompt redelivery; it also carries the trace for the log records.
//
//	nil                      -> Ack
//	wrapping ErrManualAck    -> nothing: the caller acks later
//	ctx ended                -> Nak
//	IsPermanent              -> DeadLetter.Send (bounded by DLQTimeout),
//	                            then TermWithReason (reason cleaned, capped
//	                            at MaxReasonLen); Nak with backoff if the
//	                            dead letter could not be stored
//	anything else            -> NakWithDelay(Backoff(NumDelivered))
func (s *Settler) Settle(ctx context.Context, msg jetstream.Msg, err error) string {
	count := func(o string) string {
		s.m.messages.WithLabelValues(s.stage, o).Inc()
		return o
	}
	switch {
	case errors.Is(err, ErrManualAck):
		s.recovered()
		return count(OutcomeManual)
	case err == nil:
		s.recovered()
		if aerr := msg.Ack(); aerr != nil {
			s.ackFailed(aerr)
		}
		return count(OutcomeAck)
	case ctx.Err() != nil:
		// Shutting down: hand the message back for prompt redelivery.
		_ = msg.Nak()
		return count(OutcomeNak)
	case IsPermanent(err):
		reason := HeaderValue(err.Error(), MaxReasonLen)
		var stream string
		var seq uint64
		if meta, merr := msg.Metadata(); merr == nil {
			stream, seq = meta.Stream, meta.Sequence.Stream
		}
		if s.dlq != nil {
			dctx, cancel := context.WithTimeout(ctx, s.dlqTimeout)
			derr := s.dlq.Send(dctx, msg, err)
			cancel()
			if derr != nil && !unsafeTermOnDLQFailure {
				s.transient(ctx, msg, fmt.Errorf("%w (while handling permanent error: %v)", derr, err))
				_ = msg.NakWithDelay(Backoff(int(min(Delivered(msg), 30))))
				return count(OutcomeNak)
			}
			count(OutcomeDLQ)
			s.log.WarnContext(ctx, "message dead-lettered", "subject", msg.Subject(),
				"stream", stream, "seq", seq, "dlq", proto.DLQSubject(s.dlq.Stage()), "reason", reason)
		} else {
			s.log.ErrorContext(ctx, "permanent failure without a dead-letter stream; terminating message",
				"subject", msg.Subject(), "stream", stream, "seq", seq, "reason", reason)
		}
		if terr := msg.TermWithReason(reason); terr != nil {
			s.ackFailed(terr)
		}
		return count(OutcomeTerm)
	default:
		s.transient(ctx, msg, err)
		_ = msg.NakWithDelay(Backoff(int(min(Delivered(msg), 30))))
		return count(OutcomeNak)
	}
}

func (s *Settler) transient(ctx context.Context, msg jetstream.Msg, err error) {
	if s.failing.CompareAndSwap(false, true) {
		s.log.WarnContext(ctx, "handler failing; naking with backoff (logged once until it recovers)",
			"subject", msg.Subject(), "error", err)
	}
}

func (s *Settler) recovered() {
	if s.failing.CompareAndSwap(true, false) {
		s.log.Info("handler recovered")
	}
	s.ackFailing.Store(false)
}

// Recovered marks the end of a failing run for a caller that acks its
// successes itself, so the next failure is logged again.
func (s *Settler) Recovered() { s.recovered() }

func (s *Settler) ackFailed(err error) {
	if s.ackFailing.CompareAndSwap(false, true) {
		s.log.Warn("acking failed (logged once); the message will be redelivered", "error", err)
	}
}
