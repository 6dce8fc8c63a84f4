package natsx

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
)

// BenchmarkPublisher measures bounded async publishing of 1 KiB messages
// with message ids to the embedded server (file store, no fsync).
func BenchmarkPublisher(b *testing.B) {
	e := startJSB(b)
	p := NewPublisher(e.js, 256)
	ctx := context.Background()
	data := make([]byte, 1024)
	b.SetBytes(int64(len(data)))
	i := 0
	for b.Loop() {
		i++
		if _, err := p.Publish(ctx, &nats.Msg{Subject: proto.RoutedSubject(i%16, "d"+strconv.Itoa(i%100)), Data: data,
			Header: nats.Header{proto.HeaderMsgID: {"b" + strconv.Itoa(i)}}}); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Wait(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkConsume measures Consume's per-message overhead (fetch, trace
// extraction, span, ack) with a no-op handler.
func BenchmarkConsume(b *testing.B) {
	e := startJSB(b)
	ctx := context.Background()
	p := NewPublisher(e.js, 256)
	data := make([]byte, 1024)
	n := b.N
	for range n {
		if _, err := p.Publish(ctx, &nats.Msg{Subject: proto.ChangesSubject("public.t"), Data: data}); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	cons, err := e.js.CreateOrUpdateConsumer(ctx, proto.StreamChanges, jetstream.ConsumerConfig{Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10000})
	if err != nil {
		b.Fatal(err)
	}
	var handled atomic.Int64
	done := make(chan struct{})
	cctx, cancel := context.WithCancel(ctx)
	b.ResetTimer()
	go func() {
		defer close(done)
		_ = Consume(cctx, cons, func(context.Context, jetstream.Msg) error {
			if handled.Add(1) == int64(n) {
				// Not the shutdown: an open fetch waits out its expiry.
				b.StopTimer()
				cancel()
			}
			return nil
		}, ConsumeOptions{Stage: "bench", Fetch: 256, MaxWait: time.Second, Log: discard})
	}()
	<-done
	b.SetBytes(int64(len(data)))
}
