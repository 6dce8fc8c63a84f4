package state

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTracedCursorsRecords checks the decorator records one span per cursor
// write with the write's outcome: advanced, stale, and lease lost, for
// Advance and AdvanceMany; the cursor moves exactly as through Cursors.
func TestTracedCursorsRecords(t *testing.T) {
	ctx := context.Background()
	pool, ls, cs := migrated(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(ctx) })
	tc := TraceCursors(cs, tp)

	l := acquire(t, ls, "flusher-p0", "a", time.Minute)
	if ok, err := tc.Advance(ctx, l, "d1", 0, pos(200, 1)); !ok || err != nil {
		t.Fatalf("advance: %v %v", ok, err)
	}
	if ok, err := tc.Advance(ctx, l, "d1", 0, pos(100, 1)); ok || err != nil {
		t.Fatalf("stale advance: %v %v", ok, err)
	}
	res, err := tc.AdvanceMany(ctx, []CursorAdvance{
		{Lease: l, Destination: "d1", Partition: 0, Position: pos(150, 1)}, // stale
		{Lease: l, Destination: "d2", Partition: 0, Position: pos(150, 1)},
	})
	if err != nil || res[0].Advanced || res[0].Err != nil || !res[1].Advanced {
		t.Fatalf("advance many: %+v %v", res, err)
	}
	expire(t, pool, "flusher-p0")
	if _, err := tc.Advance(ctx, l, "d1", 0, pos(300, 1)); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("expired lease advance: %v", err)
	}
	if got, _, _ := cs.Get(ctx, "d1"); got != pos(200, 1) {
		t.Fatalf("cursor d1 at %s, want 0/C8:1", got)
	}

	type want struct {
		name  string
		stale bool
		err   bool
	}
	wants := []want{
		{"state.cursor.advance", false, false},
		{"state.cursor.advance", true, false},
		{"state.cursor.advance_many", true, false},
		{"state.cursor.advance", false, true},
	}
	spans := rec.Ended()
	if len(spans) != len(wants) {
		t.Fatalf("%d spans, want %d", len(spans), len(wants))
	}
	for i, w := range wants {
		s := spans[i]
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			attrs[kv.Key] = kv.Value
		}
		if s.Name() != w.name {
			t.Errorf("span %d: %s, want %s", i, s.Name(), w.name)
		}
		if got := attrs["sluice.cursor.stale"].AsBool(); got != w.stale {
			t.Errorf("span %d (%s): stale %v, want %v", i, s.Name(), got, w.stale)
		}
		if got := s.Status().Code == codes.Error && len(s.Events()) > 0; got != w.err {
			t.Errorf("span %d (%s): error recorded %v, want %v", i, s.Name(), got, w.err)
		}
	}
	if got := spans[0].Attributes(); !hasAttr(got, attribute.String("sluice.destination", "d1")) || !hasAttr(got, attribute.Int64("sluice.lease.term", l.Term)) {
		t.Errorf("advance span attributes %v", got)
	}
	if got := spans[2].Attributes(); !hasAttr(got, attribute.Int("sluice.cursors", 2)) {
		t.Errorf("advance_many span attributes %v", got)
	}
}

func hasAttr(kvs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, kv := range kvs {
		if kv == want {
			return true
		}
	}
	return false
}
