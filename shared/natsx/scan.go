package natsx

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ScanStream reads up to n messages of stream matching filter, oldest
// first, calling each on every one; it stops early when the stream holds
// no more. Each fetch asks for exactly what is left, so it returns as soon
// as it has it (it waits the full wait only when messages vanished
// meanwhile).
func ScanStream(ctx context.Context, stream jetstream.Stream, filter string, n int, wait time.Duration, each func(seq uint64, at time.Time, m jetstream.Msg)) error {
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return err
	}
	for read := 0; read < n; {
		batch, err := cons.Fetch(max(min(n-read, 256), 1), jetstream.FetchMaxWait(wait))
		if err != nil {
			return err
		}
		got, last := 0, false
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			read++
			each(meta.Sequence.Stream, meta.Timestamp, m)
			last = meta.NumPending == 0
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if got == 0 || last {
			return nil
		}
	}
	return nil
}
