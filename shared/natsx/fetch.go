package natsx

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Fetch pulls up to n messages from cons, the request expiring on the
// server after wait. It is the one fetch of every consume loop (Consume,
// the flusher's partition loops): a server-side expiry (FetchMaxWait),
// never a FetchContext. When a fetch's context ends, nats.go drops the
// messages the server already sent for it, and they stay ack-pending
// until AckWait (hours for the flusher: a loaded machine lost hundreds of
// messages per 10,000 that way and BenchmarkFanout stalled). With a
// server-side expiry the client waits a second past wait for the last
// ones, so a loop stopping waits at most wait + 1s for its open fetch.
func Fetch(cons jetstream.Consumer, n int, wait time.Duration) (jetstream.MessageBatch, error) {
	return cons.Fetch(n, jetstream.FetchMaxWait(wait))
}

// FetchErr is the error a fetched batch ended with, nil when it ended as
// every fetch may: expired with fewer than it asked for, or no messages.
func FetchErr(batch jetstream.MessageBatch) error {
	err := batch.Error()
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, jetstream.ErrNoMessages) {
		return nil
	}
	return err
}
