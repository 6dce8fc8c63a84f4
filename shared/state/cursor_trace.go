package state

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-cdc/sluice/proto"
)

// TracedCursors is Cursors with a span around each cursor write:
// state.cursor.advance (destination, position, lease term) and
// state.cursor.advance_many (the number of cursors). A stale write (the
// cursor already past the position) sets sluice.cursor.stale; an error is
// recorded on the span. Reads pass through untraced. The cursor rules
// themselves live in Cursors alone.
type TracedCursors struct {
	*Cursors
	tracer trace.Tracer
}

// TraceCursors wraps c; a nil tp is the global tracer provider.
func TraceCursors(c *Cursors, tp trace.TracerProvider) *TracedCursors {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &TracedCursors{Cursors: c, tracer: tp.Tracer(TracerName)}
}

// Advance is Cursors.Advance in a state.cursor.advance span.
func (t *TracedCursors) Advance(ctx context.Context, l Lease, destination string, partition int, pos proto.Position) (bool, error) {
	ctx, span := t.tracer.Start(ctx, "state.cursor.advance", trace.WithAttributes(
		attribute.String("sluice.destination", destination),
		attribute.String("sluice.position", pos.String()),
		attribute.Int64("sluice.lease.term", l.Term)))
	defer span.End()
	ok, err := t.Cursors.Advance(ctx, l, destination, partition, pos)
	switch {
	case err != nil:
		recordError(span, err)
	case !ok:
		span.SetAttributes(attribute.Bool("sluice.cursor.stale", true))
	}
	return ok, err
}

// AdvanceMany is Cursors.AdvanceMany in a state.cursor.advance_many span.
func (t *TracedCursors) AdvanceMany(ctx context.Context, advs []CursorAdvance) ([]AdvanceResult, error) {
	ctx, span := t.tracer.Start(ctx, "state.cursor.advance_many", trace.WithAttributes(
		attribute.Int("sluice.cursors", len(advs))))
	defer span.End()
	res, err := t.Cursors.AdvanceMany(ctx, advs)
	if err != nil {
		recordError(span, err)
		return res, err
	}
	for _, r := range res {
		if !r.Advanced && r.Err == nil {
			span.SetAttributes(attribute.Bool("sluice.cursor.stale", true))
			break
		}
	}
	return res, err
}

func recordError(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
