package natsx

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ResetPending makes every message that durable consumers of js have
// delivered and not yet acked deliverable again at once: each consumer
// with acks pending is reset to its ack floor (JetStream's consumer reset,
// nats-server 2.14 and later), instead of waiting out AckWait for each.
// It returns "stream/consumer" of each consumer it reset.
//
// Only a process that knows every client those messages were delivered to
// is gone may call it: `sluice dev` on its embedded server just after a
// crash of its predecessor. It is safe for the pipeline's rules even when
// a client is not gone: a message is only ever delivered again (delivery
// is at least once, every stage is idempotent by message id or position),
// the ack floor does not move (the frontiers read it), and a flusher that
// claims a partition still settles on the consumer's ack-pending count.
func ResetPending(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	var reset []string
	streams := js.ListStreams(ctx)
	for si := range streams.Info() {
		s, err := js.Stream(ctx, si.Config.Name)
		if err != nil {
			return reset, fmt.Errorf("resetting consumers of %s: %w", si.Config.Name, err)
		}
		consumers := s.ListConsumers(ctx)
		for ci := range consumers.Info() {
			if ci.NumAckPending == 0 || ci.Config.Durable == "" {
				continue
			}
			if _, err := js.ResetConsumer(ctx, si.Config.Name, ci.Name); err != nil {
				return reset, fmt.Errorf("resetting consumer %s of %s: %w", ci.Name, si.Config.Name, err)
			}
			reset = append(reset, si.Config.Name+"/"+ci.Name)
		}
		if err := consumers.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			return reset, fmt.Errorf("listing consumers of %s: %w", si.Config.Name, err)
		}
	}
	if err := streams.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return reset, fmt.Errorf("listing streams: %w", err)
	}
	return reset, nil
}
