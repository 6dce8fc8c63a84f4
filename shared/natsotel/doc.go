// Package natsotel carries W3C trace context (traceparent, tracestate) in
// NATS message headers, so a batch's trace continues across every stage.
//
// It owns one thing: a case-preserving propagation.TextMapCarrier over
// nats.Header. nats.Header keys are case-sensitive, and
// propagation.HeaderCarrier would canonicalise "traceparent" to
// "Traceparent", which other W3C implementations do not read.
//
// natsotel must never start spans, publish, or touch message bodies.
//
// NOTES: Inject and Extract use otel.GetTextMapPropagator(); when no
// propagator has been installed (the global default is a no-op, e.g. in a
// test that never called telemetry.Setup) they fall back to W3C TraceContext,
// so trace ids are never silently dropped between stages.
package natsotel
