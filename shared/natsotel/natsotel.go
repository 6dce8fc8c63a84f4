package natsotel

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier adapts nats.Header to propagation.TextMapCarrier without
// changing the case of keys.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key, matched exactly.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key, keeping the key's case.
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the keys of the header.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

var fallback propagation.TextMapPropagator = propagation.TraceContext{}

func propagator() propagation.TextMapPropagator {
	p := otel.GetTextMapPropagator()
	if len(p.Fields()) == 0 {
		return fallback
	}
	return p
}

// Inject writes the trace context of ctx into h ("traceparent",
// "tracestate"). h must be non-nil; a nil h is left alone.
func Inject(ctx context.Context, h nats.Header) {
	if h == nil {
		return
	}
	propagator().Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx carrying the remote span context found in h, or ctx
// unchanged when h carries none.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return propagator().Extract(ctx, HeaderCarrier(h))
}
