package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/shared/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoggerAddsContextFields(t *testing.T) {
	var buf bytes.Buffer
	log := NewLoggerTo(&buf, config.Telemetry{LogLevel: "debug", LogFormat: "json"}, "router")
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	ctx = WithTable(WithDestination(ctx, "shop1"), "public.orders")
	log.With("k", "v").WithGroup("g").InfoContext(ctx, "hello", "x", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	sc := span.SpanContext()
	// Context attributes land inside the open group; that is slog's rule for
	// attributes added in Handle.
	g, _ := rec["g"].(map[string]any)
	if g == nil {
		t.Fatalf("record %v", rec)
	}
	want := map[string]any{"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String(), "destination": "shop1", "table": "public.orders"}
	for k, v := range want {
		if g[k] != v {
			t.Errorf("%s = %v, want %v (record %s)", k, g[k], v, buf.String())
		}
	}
	if rec["service"] != "router" || rec["k"] != "v" || rec["msg"] != "hello" {
		t.Errorf("record %s", buf.String())
	}

	buf.Reset()
	log.Info("no context")
	if strings.Contains(buf.String(), "trace_id") || strings.Contains(buf.String(), "destination") {
		t.Errorf("context fields without a context: %s", buf.String())
	}
}

func TestLoggerLevelAndFormat(t *testing.T) {
	var buf bytes.Buffer
	log := NewLoggerTo(&buf, config.Telemetry{LogLevel: "warn", LogFormat: "text"}, "x")
	log.Info("hidden")
	log.Warn("shown")
	out := buf.String()
	if strings.Contains(out, "hidden") || !strings.Contains(out, "WARN  x         shown\n") {
		t.Fatalf("output %q", out)
	}
	for in, want := range map[string]string{"debug": "DEBUG", "INFO": "INFO", "warning": "WARN", "error": "ERROR", "": "INFO", "bogus": "INFO"} {
		if got := ParseLevel(in).String(); got != want {
			t.Errorf("ParseLevel(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSetupInstallsProviderAndPropagator(t *testing.T) {
	ctx := context.Background()
	shutdown, err := Setup(ctx, "reader", config.Telemetry{})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(ctx)
	_, span := Tracer("test").Start(ctx, "op")
	if !span.SpanContext().IsValid() {
		t.Fatal("no real trace ids without an OTLP endpoint")
	}
	span.End()
	fields := otel.GetTextMapPropagator().Fields()
	if !strings.Contains(strings.Join(fields, ","), "traceparent") || !strings.Contains(strings.Join(fields, ","), "baggage") {
		t.Fatalf("propagator fields %v", fields)
	}
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	otel.SetTextMapPropagator(propagation.TraceContext{})
}

func TestTracerProviderResource(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp, err := NewTracerProvider(context.Background(), "flusher", config.Telemetry{}, sdktrace.WithSpanProcessor(rec))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(context.Background(), "flush")
	span.End()
	_ = tp.Shutdown(context.Background())
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans", len(ended))
	}
	var name string
	for _, kv := range ended[0].Resource().Attributes() {
		if kv.Key == "service.name" {
			name = kv.Value.AsString()
		}
	}
	if name != "sluice-flusher" {
		t.Fatalf("service.name = %q", name)
	}
}

func TestOTLPExporterDoesNotBlock(t *testing.T) {
	// An endpoint nobody listens on: setup succeeds (the gRPC connection is
	// lazy) and shutdown returns within its context.
	exportTimeout, exportRetry = 300*time.Millisecond, false
	defer func() { exportTimeout, exportRetry = 10*time.Second, true }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tp, err := NewTracerProvider(ctx, "x", config.Telemetry{OTLPEndpoint: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(ctx, "s")
	span.End()
	start := time.Now()
	_ = tp.Shutdown(ctx) // reports the export failure; must not hang
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %s", d)
	}
}

func TestNewRegistry(t *testing.T) {
	a, b := NewRegistry(), NewRegistry()
	mfs, err := a.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var goSeen bool
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "go_") {
			goSeen = true
		}
	}
	if !goSeen {
		t.Fatal("no Go collector metrics")
	}
	if _, err := b.Gather(); err != nil {
		t.Fatal(err)
	}
}

// Without an exporter, the spans a process starts are not recorded but
// keep valid ids (logged and propagated); a trace that arrives sampled
// stays sampled. Control: with a span processor (an exporter's place),
// spans are recorded.
func TestUnexportedSpansNotRecorded(t *testing.T) {
	tp, err := NewTracerProvider(context.Background(), "flusher", config.Telemetry{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("t").Start(context.Background(), "flush")
	if span.IsRecording() || span.SpanContext().IsSampled() || !span.SpanContext().IsValid() {
		t.Fatalf("root span without exporter: recording %v sampled %v valid %v", span.IsRecording(), span.SpanContext().IsSampled(), span.SpanContext().IsValid())
	}
	_, child := tp.Tracer("t").Start(ctx, "child")
	if child.SpanContext().TraceID() != span.SpanContext().TraceID() || child.IsRecording() {
		t.Fatal("child span: not in the same unrecorded trace")
	}
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true})
	_, in := tp.Tracer("t").Start(trace.ContextWithRemoteSpanContext(context.Background(), remote), "in")
	if !in.SpanContext().IsSampled() {
		t.Fatal("a sampled incoming trace lost its sampled flag")
	}

	rec := tracetest.NewSpanRecorder()
	tp2, err := NewTracerProvider(context.Background(), "flusher", config.Telemetry{}, sdktrace.WithSpanProcessor(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tp2.Shutdown(context.Background()) }()
	if _, s := tp2.Tracer("t").Start(context.Background(), "flush"); !s.IsRecording() {
		t.Fatal("control: a provider with a span processor does not record")
	}
}

// A collector that does not answer is logged once a minute, not once per
// export.
func TestExportErrorsAreLoggedOnceAMinute(t *testing.T) {
	var out strings.Builder
	e := &exportErrors{log: NewLoggerTo(&out, config.Telemetry{LogFormat: "json"}, "x"), every: time.Minute}
	for range 5 {
		e.Handle(errors.New("connection refused"))
	}
	if n := strings.Count(out.String(), "exporting traces failed"); n != 1 {
		t.Fatalf("%d log lines for 5 errors in a minute:\n%s", n, out.String())
	}
	e.last = time.Now().Add(-2 * time.Minute)
	e.Handle(errors.New("connection refused"))
	if !strings.Contains(out.String(), `"errors_since_last_logged":4`) {
		t.Fatalf("the second line does not count the 4 kept quiet:\n%s", out.String())
	}
}
