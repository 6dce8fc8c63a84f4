package delivery

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-cdc/sluice/proto"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// TestFlushSpan: one flusher.flush span per destination flush, with its
// attributes and a link to the span of every message it flushed.
func TestFlushSpan(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	// The package's tracer delegates to the first global provider set; the
	// recorder is switched off when the test ends.
	rec := &switchedRecorder{SpanRecorder: sr}
	rec.on.Store(true)
	t.Cleanup(func() { rec.on.Store(false) })
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.FlushInterval = 300 * time.Millisecond })
	traces := []string{"0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736"}
	for i, tr := range traces {
		e.header = nats.Header{"traceparent": []string{"00-" + tr + "-b7ad6b7169203331-01"}}
		e.publishParts(t, destRows{"shop1", []pt.Row{{ID: int64(i + 1), LSN: uint64(10 * (i + 1)), Seq: 1}, {ID: int64(i + 10), LSN: uint64(10 * (i + 1)), Seq: 2}}})
	}
	e.header = nil
	e.start(t, "a", nil)
	waitFor(t, 10*time.Second, "the cursor", func() bool { return e.cursor(t, "shop1") == (proto.Position{LSN: 20, Seq: 2}) })
	var spans []sdktrace.ReadOnlySpan
	waitFor(t, 5*time.Second, "the flush span", func() bool {
		spans = spans[:0]
		for _, s := range sr.Ended() {
			if s.Name() == "flusher.flush" {
				spans = append(spans, s)
			}
		}
		return len(spans) > 0
	})
	rows, links := int64(0), map[string]bool{}
	for _, s := range spans {
		got := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			got[kv.Key] = kv.Value
		}
		part := proto.Partition("shop1", e.cfg.Delivery.Partitions)
		if got["messaging.system"].AsString() != "nats" || got["messaging.operation.type"].AsString() != "process" ||
			got["messaging.destination.name"].AsString() != proto.RoutedPartitionSubject(part) ||
			got["sluice.destination"].AsString() != "shop1" || got["sluice.partition"].AsInt64() != int64(part) ||
			got["sluice.messages"].AsInt64() != int64(len(s.Links())) || len(got) != 7 {
			t.Fatalf("flush span attributes %v, %d links", s.Attributes(), len(s.Links()))
		}
		rows += got["sluice.rows"].AsInt64()
		for _, l := range s.Links() {
			links[l.SpanContext.TraceID().String()] = true
		}
	}
	if rows != 4 || len(links) != len(traces) || !links[traces[0]] || !links[traces[1]] {
		t.Fatalf("flush spans: %d rows, links to %v", rows, links)
	}
}

// switchedRecorder records spans while on.
type switchedRecorder struct {
	*tracetest.SpanRecorder
	on atomic.Bool
}

func (r *switchedRecorder) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	if r.on.Load() {
		r.SpanRecorder.OnStart(ctx, s)
	}
}

func (r *switchedRecorder) OnEnd(s sdktrace.ReadOnlySpan) {
	if r.on.Load() {
		r.SpanRecorder.OnEnd(s)
	}
}
