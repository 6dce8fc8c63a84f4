package natsx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
)

// PublishAttemptTimeout bounds one attempt of PublishSync.
const PublishAttemptTimeout = 5 * time.Second

// DefaultAckTimeout is how long a Publisher waits for a PubAck before it
// resolves the future with ErrPublishTimeout.
const DefaultAckTimeout = 30 * time.Second

// Publisher publishes asynchronously with at most maxInFlight publishes
// awaiting their PubAck.
type Publisher struct {
	js  jetstream.JetStream
	sem chan struct{}
	// AckTimeout bounds the wait for each PubAck (default DefaultAckTimeout).
	// Set it before the first Publish.
	AckTimeout time.Duration
}

// NewPublisher returns a Publisher with at most maxInFlight outstanding
// publishes (minimum 1).
func NewPublisher(js jetstream.JetStream, maxInFlight int) *Publisher {
	return &Publisher{js: js, sem: make(chan struct{}, max(maxInFlight, 1)), AckTimeout: DefaultAckTimeout}
}

// InFlight returns the number of publishes awaiting their ack.
func (p *Publisher) InFlight() int { return len(p.sem) }

// Publish publishes msg asynchronously, deduplicated by its Nats-Msg-Id
// header when present. It blocks while maxInFlight publishes are
// outstanding, until ctx ends. The future resolves with the PubAck, the
// publish error, or ErrPublishTimeout.
func (p *Publisher) Publish(ctx context.Context, msg *nats.Msg) (jetstream.PubAckFuture, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("publishing to %s: waiting for an in-flight slot: %w", msg.Subject, ctx.Err())
	}
	f, err := p.js.PublishMsgAsync(msg, msgIDOpts(msg)...)
	if err != nil {
		<-p.sem
		return nil, fmt.Errorf("publishing to %s: %w", msg.Subject, err)
	}
	out := &future{msg: msg, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	timeout := p.AckTimeout
	if timeout <= 0 {
		timeout = DefaultAckTimeout
	}
	// This goroutine ends when the inner future resolves or the timeout
	// fires, whichever is first; at most maxInFlight exist at once.
	go func() {
		defer func() { <-p.sem }()
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case ack := <-f.Ok():
			out.ok <- ack
		case err := <-f.Err():
			out.err <- fmt.Errorf("publishing to %s: %w", msg.Subject, err)
		case <-t.C:
			out.err <- fmt.Errorf("publishing to %s: %w after %s", msg.Subject, ErrPublishTimeout, timeout)
		}
	}()
	return out, nil
}

// Wait blocks until every outstanding publish has resolved, or ctx ends.
func (p *Publisher) Wait(ctx context.Context) error {
	n := cap(p.sem)
	for i := 0; i < n; i++ {
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			for ; i > 0; i-- {
				<-p.sem
			}
			return fmt.Errorf("waiting for in-flight publishes: %w", ctx.Err())
		}
	}
	for i := 0; i < n; i++ {
		<-p.sem
	}
	return nil
}

type future struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func (f *future) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *future) Err() <-chan error            { return f.err }
func (f *future) Msg() *nats.Msg               { return f.msg }

func msgIDOpts(msg *nats.Msg) []jetstream.PublishOpt {
	if msg.Header == nil {
		return nil
	}
	if id := msg.Header.Get(proto.HeaderMsgID); id != "" {
		return []jetstream.PublishOpt{jetstream.WithMsgID(id)}
	}
	return nil
}

// PublishSync publishes msg and waits for its PubAck, retrying with Backoff
// on transient errors (no responders, timeouts, a full stream, a
// reconnecting connection) until ctx ends. Deduplicated by the Nats-Msg-Id
// header when present, so a retry after a lost ack stores nothing twice
// within the duplicate window.
func PublishSync(ctx context.Context, js jetstream.JetStream, msg *nats.Msg) (*jetstream.PubAck, error) {
	opts := msgIDOpts(msg)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, PublishAttemptTimeout)
		ack, err := js.PublishMsg(actx, msg, opts...)
		cancel()
		if err == nil {
			return ack, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("publishing to %s: %w (last error: %v)", msg.Subject, ctx.Err(), err)
		}
		if !IsTransientPublishError(err) {
			return nil, fmt.Errorf("publishing to %s: %w", msg.Subject, err)
		}
		if !Sleep(ctx, Backoff(attempt)) {
			return nil, fmt.Errorf("publishing to %s: %w (last error: %v)", msg.Subject, ctx.Err(), err)
		}
	}
}

// IsTransientPublishError reports whether a publish failed for a reason that
// retrying can fix: no stream responded, a timeout, a reconnecting
// connection, or a stream that refused the message because it is full
// (discard new) or its store failed.
func IsTransientPublishError(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout),
		errors.Is(err, ErrPublishTimeout):
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeStreamStoreFailed, errCodeStreamResourcesExceeded, errCodeClusterNotAvail, errCodeStreamOffline:
			return true
		}
		return apiErr.Code == 503
	}
	return false
}

// JetStream API error codes (nats-server jetstream_errors_generated.go).
const (
	errCodeStreamStoreFailed       jetstream.ErrorCode = 10077 // maximum bytes/messages exceeded with discard new, store errors
	errCodeStreamResourcesExceeded jetstream.ErrorCode = 10047 // storage resources exceeded
	errCodeClusterNotAvail         jetstream.ErrorCode = 10008
	errCodeStreamOffline           jetstream.ErrorCode = 10118
)
