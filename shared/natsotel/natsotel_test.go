package natsotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsotel"
	"github.com/sluice-cdc/sluice/shared/natsx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCarrierPreservesCase(t *testing.T) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	h := nats.Header{}
	natsotel.Inject(ctx, h)
	if _, ok := h[proto.HeaderTraceparent]; !ok {
		t.Fatalf("header keys %v: want lowercase %q", h, proto.HeaderTraceparent)
	}
	if _, ok := h["Traceparent"]; ok {
		t.Fatal("canonicalised key written")
	}
	got := trace.SpanContextFromContext(natsotel.Extract(context.Background(), h))
	if got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %v, want %v", got, span.SpanContext())
	}
	// Nothing to extract: ctx unchanged.
	if sc := trace.SpanContextFromContext(natsotel.Extract(context.Background(), nil)); sc.IsValid() {
		t.Fatal("extracted a span from nil headers")
	}
	natsotel.Inject(ctx, nil) // must not panic
}

func TestFallbackWithoutGlobalPropagator(t *testing.T) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator()) // no fields: like the default no-op
	defer otel.SetTextMapPropagator(propagation.TraceContext{})
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	h := nats.Header{}
	natsotel.Inject(ctx, h)
	if h.Get(proto.HeaderTraceparent) == "" {
		t.Fatal("no traceparent written without a global propagator")
	}
}

// The requirement: trace context survives a publish and a consume
// through a real (embedded) JetStream server.
func TestTraceSurvivesJetStream(t *testing.T) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	defer tp.Shutdown(context.Background())

	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := config.Default()
	nc, js, err := natsx.Connect(ctx, cfg.NATS, srv.ClientURL(), "otel-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := natsx.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}

	pctx, pspan := tp.Tracer("reader").Start(ctx, "publish batch")
	msg := &nats.Msg{Subject: proto.ChangesSubject("public.orders"), Data: []byte("batch"), Header: nats.Header{}}
	natsotel.Inject(pctx, msg.Header)
	if _, err := natsx.PublishSync(ctx, js, msg); err != nil {
		t.Fatal(err)
	}
	pspan.End()
	want := pspan.SpanContext()

	cons, err := js.CreateOrUpdateConsumer(ctx, proto.StreamChanges, jetstream.ConsumerConfig{Durable: proto.ConsumerRouter, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	// Raw consume: the stored headers still carry the context.
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	raw := trace.SpanContextFromContext(natsotel.Extract(context.Background(), m.Headers()))
	if raw.TraceID() != want.TraceID() || raw.SpanID() != want.SpanID() {
		t.Fatalf("raw consume: got %v, want %v", raw, want)
	}
	_ = m.Nak()

	// natsx.Consume: the handler's ctx continues the publisher's trace.
	got := make(chan trace.SpanContext, 1)
	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- natsx.Consume(cctx, cons, func(hctx context.Context, _ jetstream.Msg) error {
			_, child := tp.Tracer("router").Start(hctx, "route batch")
			child.End()
			got <- child.SpanContext()
			return nil
		}, natsx.ConsumeOptions{Stage: "router", MaxWait: 200 * time.Millisecond})
	}()
	var sc trace.SpanContext
	select {
	case sc = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never ran")
	}
	ccancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if sc.TraceID() != want.TraceID() {
		t.Fatalf("handler span trace %s, want %s", sc.TraceID(), want.TraceID())
	}
	// The consume span is a child of the publish span.
	var found bool
	for _, s := range rec.Ended() {
		if s.Name() == "process router" {
			found = true
			if s.Parent().SpanID() != want.SpanID() || s.SpanKind() != trace.SpanKindConsumer {
				t.Errorf("process span parent %s kind %v, want parent %s", s.Parent().SpanID(), s.SpanKind(), want.SpanID())
			}
		}
	}
	if !found {
		t.Error("no process span recorded")
	}
}
