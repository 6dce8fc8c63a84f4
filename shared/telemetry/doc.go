// Package telemetry sets up what every sluice process observes itself with:
// the slog logger (JSON or text to stdout, with trace_id, span_id,
// destination and table copied from the context into every record), the
// OpenTelemetry tracer provider and W3C propagator, and the Prometheus
// registry with Go and process collectors, and MustRegister, the one way a
// component registers its metrics (a duplicate shares the registered one).
//
// telemetry must never register on the global Prometheus registry, never
// log a configuration value that may hold a secret, and never fail a service
// because a trace collector is unreachable (export is best-effort, batched
// and bounded).
//
// NOTES: Setup always installs a real SDK TracerProvider, even without an
// OTLP endpoint, so trace ids are created and propagated through NATS
// headers; without an endpoint the traces a process starts are not sampled
// (no span records attributes or links only to drop them), and a trace that
// arrives sampled stays sampled.
package telemetry
