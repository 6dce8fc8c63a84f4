package capture

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/confirm"
)

// PublishFunc is jetstream.JetStream.PublishMsgAsync; tests wrap it to
// inject faults the broker cannot produce on demand.
type PublishFunc func(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)

// Out is one message to publish.
type Out struct {
	Msg     *nats.Msg
	ID      string
	Through proto.LSN
	Table   string // "" for a tick
	Rows    int
	Span    trace.Span // ended when the publish resolves
	onAck   func()     // called once the message is acked (a resync chunk's)
}

// Pipeline publishes in order with bounded in-flight and feeds the
// confirmed-LSN tracker. One goroutine calls Acquire/Send; acks resolve on
// goroutines the pipeline owns (Wait).
type Pipeline struct {
	pub     PublishFunc
	tracker *confirm.Tracker
	sem     chan struct{}
	ackWait time.Duration
	onAck   func(o Out, d time.Duration)

	// lastSeq is the stream sequence the last message sent will be stored
	// at (the chain: the next message expects it as the stream's last).
	lastSeq uint64
	chained bool // false until a non-duplicate store after (re)start
	// noChain switches the ordering guard off (tests' negative control).
	noChain bool

	wg      sync.WaitGroup
	errOnce sync.Once
	err     error
	failed  chan struct{}
}

// NewPipeline returns a pipeline of at most inFlight unacked messages.
func NewPipeline(pub PublishFunc, tracker *confirm.Tracker, inFlight int, ackWait time.Duration, onAck func(Out, time.Duration)) *Pipeline {
	if onAck == nil {
		onAck = func(Out, time.Duration) {}
	}
	return &Pipeline{pub: pub, tracker: tracker, sem: make(chan struct{}, max(inFlight, 1)),
		ackWait: ackWait, onAck: onAck, failed: make(chan struct{})}
}

func (p *Pipeline) fail(err error) {
	p.errOnce.Do(func() {
		p.err = err
		close(p.failed)
	})
}

// Err is the first publish failure, or nil.
func (p *Pipeline) Err() error {
	select {
	case <-p.failed:
		return p.err
	default:
		return nil
	}
}

// Failed is closed on the first publish failure.
func (p *Pipeline) Failed() <-chan struct{} { return p.failed }

// Acquire waits up to wait for an in-flight slot; false means none freed
// (the caller does its periodic work and calls again).
func (p *Pipeline) Acquire(ctx context.Context, wait time.Duration) (bool, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case p.sem <- struct{}{}:
		return true, nil
	case <-p.failed:
		return false, p.err
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
		return false, nil
	}
}

// Send publishes o in a slot obtained from Acquire.
func (p *Pipeline) Send(ctx context.Context, o Out) error {
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(o.ID)}
	if p.chained && !p.noChain {
		opts = append(opts, jetstream.WithExpectLastSequence(p.lastSeq))
	}
	tk := p.tracker.Add(uint64(o.Through))
	start := time.Now()
	fut, err := p.pub(o.Msg, opts...)
	if err != nil {
		<-p.sem
		p.endSpan(o, err)
		err = fmt.Errorf("%w: message %s: %w", ErrPublish, o.ID, err)
		p.fail(err)
		return err
	}
	if !p.chained {
		// Catch-up: one at a time until the broker stores a new message;
		// its sequence starts the chain.
		ack, err := p.await(ctx, fut, tk, o, start)
		if err != nil {
			return err
		}
		if !ack.Duplicate {
			p.chained, p.lastSeq = true, ack.Sequence
		}
		return nil
	}
	// The reader is CHANGES' only publisher, so a stored message takes the
	// next sequence; a message refused, lost or deduplicated leaves the
	// stream's last sequence below what the next one expects, and the next
	// one is refused in turn (the session ends and restarts from the
	// confirmed LSN).
	p.lastSeq++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_, _ = p.await(ctx, fut, tk, o, start)
	}()
	return nil
}

func (p *Pipeline) await(ctx context.Context, fut jetstream.PubAckFuture, tk confirm.Ticket, o Out, start time.Time) (ack *jetstream.PubAck, err error) {
	defer func() { <-p.sem }()
	t := time.NewTimer(p.ackWait)
	defer t.Stop()
	select {
	case ack := <-fut.Ok():
		if _, err := p.tracker.Ack(tk); err != nil {
			err = fmt.Errorf("%w: message %s: %w", ErrPublish, o.ID, err)
			p.fail(err)
			p.endSpan(o, err)
			return nil, err
		}
		p.onAck(o, time.Since(start))
		p.endSpan(o, nil)
		return ack, nil
	case err = <-fut.Err():
		err = fmt.Errorf("%w: message %s: %w", ErrPublish, o.ID, err)
	case <-t.C:
		err = fmt.Errorf("%w: message %s: no ack within %s", ErrPublish, o.ID, p.ackWait)
	case <-ctx.Done():
		err = fmt.Errorf("%w: message %s: %w", ErrPublish, o.ID, ctx.Err())
	}
	p.fail(err)
	p.endSpan(o, err)
	return nil, err
}

func (p *Pipeline) endSpan(o Out, err error) {
	if o.Span == nil {
		return
	}
	if err != nil {
		o.Span.RecordError(err)
		o.Span.SetStatus(codes.Error, err.Error())
	}
	o.Span.End()
}

// Pending is the number of messages not yet in the acked prefix.
func (p *Pipeline) Pending() int { return p.tracker.Pending() }

// Wait blocks until every in-flight publish resolved (acked, failed or
// timed out).
func (p *Pipeline) Wait() { p.wg.Wait() }
