package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-cdc/sluice/shared/config"
)

// Export bounds: one export attempt, and whether failed exports are retried
// (for at most 30s). Tests shorten them.
var (
	exportTimeout = 10 * time.Second
	exportRetry   = true
)

// Setup installs the global TracerProvider (resource service.name =
// sluice-<service>; a batch span processor exporting over OTLP gRPC,
// in plaintext unless cfg.OTLPTLS or cfg.OTLPTLSCA, to cfg.OTLPEndpoint
// when it is set, naming destinations as cfg.DestinationNames says) and the W3C TraceContext +
// Baggage propagator. The returned shutdown flushes and stops the provider.
//
// Without an endpoint the spans this process starts are not sampled
// (unrecordedSampler): trace and span ids are still made, logged and
// propagated, but no span records attributes, links or events only to be
// dropped at its end — at 10,000 tenants the flusher's one span per
// destination flush was about 5% of the pipeline's CPU.
func Setup(ctx context.Context, service string, cfg config.Telemetry) (shutdown func(context.Context) error, err error) {
	tp, err := NewTracerProvider(ctx, service, cfg)
	if err != nil {
		return nil, err
	}
	otel.SetTracerProvider(tp)
	if cfg.OTLPEndpoint != "" {
		otel.SetErrorHandler(&exportErrors{log: NewLogger(cfg, service), every: time.Minute})
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}

// NewTracerProvider builds the provider Setup installs, without installing
// it (tests and embedders that want their own).
func NewTracerProvider(ctx context.Context, service string, cfg config.Telemetry, extra ...sdktrace.TracerProviderOption) (*sdktrace.TracerProvider, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "sluice-"+service),
	))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("building trace resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if cfg.OTLPEndpoint != "" {
		link := otlptracegrpc.WithInsecure()
		if cfg.OTLPTLS || cfg.OTLPTLSCA != "" {
			tc, err := tlsConfig(cfg.OTLPTLSCA)
			if err != nil {
				return nil, err
			}
			link = otlptracegrpc.WithTLSCredentials(credentials.NewTLS(tc))
		}
		exp, err := otlptracegrpc.New(ctx,
			otlptracegrpc.WithEndpoint(cfg.OTLPEndpoint),
			link,
			otlptracegrpc.WithTimeout(exportTimeout),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{
				Enabled:         exportRetry,
				InitialInterval: time.Second,
				MaxInterval:     5 * time.Second,
				MaxElapsedTime:  30 * time.Second,
			}),
		)
		if err != nil {
			return nil, fmt.Errorf("creating OTLP exporter for %s: %w", cfg.OTLPEndpoint, err)
		}
		opts = append(opts, sdktrace.WithBatcher(redactExporter(exp, cfg.DestinationNames)))
	} else if len(extra) == 0 {
		opts = append(opts, sdktrace.WithSampler(unrecordedSampler))
	}
	opts = append(opts, extra...)
	return sdktrace.NewTracerProvider(opts...), nil
}

// exportErrors is the OpenTelemetry error handler Setup installs: a
// collector that does not answer (not started yet, as under make run
// while Jaeger builds, or gone) is logged once, then at most once every
// interval with how many errors it kept quiet, not once per export (every
// 10 s, OpenTelemetry's default, to stderr).
type exportErrors struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex
	last  time.Time
	quiet int
}

func (e *exportErrors) Handle(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.last.IsZero() && time.Since(e.last) < e.every {
		e.quiet++
		return
	}
	e.log.Warn("exporting traces failed (logged at most once a minute while it fails)", "error", err, "errors_since_last_logged", e.quiet)
	e.last, e.quiet = time.Now(), 0
}

// unrecordedSampler is the sampler of a process that exports nowhere: the
// traces it starts are not sampled; a trace that arrives sampled (from a
// process that exports) stays sampled, so that its flag reaches the
// processes after this one unchanged.
var unrecordedSampler = sdktrace.ParentBased(sdktrace.NeverSample())

// Tracer returns a tracer of the global provider.
func Tracer(name string) trace.Tracer { return otel.Tracer(name) }

// NewRegistry returns a fresh Prometheus registry with the Go and process
// collectors registered.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}
