package telemetry

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-cdc/sluice/shared/config"
)

type ctxKey int

const (
	keyDestination ctxKey = iota
	keyTable
)

// WithDestination returns ctx carrying a destination name; log records made
// with it carry destination=<d>.
func WithDestination(ctx context.Context, d string) context.Context {
	return context.WithValue(ctx, keyDestination, d)
}

// WithTable returns ctx carrying a source table; log records made with it
// carry table=<t>.
func WithTable(ctx context.Context, t string) context.Context {
	return context.WithValue(ctx, keyTable, t)
}

// Destination returns the destination carried by ctx, if any.
func Destination(ctx context.Context) (string, bool) {
	d, ok := ctx.Value(keyDestination).(string)
	return d, ok
}

// Table returns the table carried by ctx, if any.
func Table(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(keyTable).(string)
	return t, ok
}

// ParseLevel reads debug, info, warn or error (default info).
func ParseLevel(s string) slog.Level {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// NewLogger returns the service's logger: JSON (or text when cfg.LogFormat
// is "text") to stdout at cfg.LogLevel, with service=<service> on every
// record and the context fields added by ContextHandler.
func NewLogger(cfg config.Telemetry, service string) *slog.Logger {
	return NewLoggerTo(os.Stdout, cfg, service)
}

// NewLoggerTo is NewLogger writing to w (tests).
func NewLoggerTo(w io.Writer, cfg config.Telemetry, service string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: ParseLevel(cfg.LogLevel)}
	var h slog.Handler
	if strings.EqualFold(cfg.LogFormat, "text") {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	l := slog.New(NewContextHandler(h))
	if service != "" {
		l = l.With("service", service)
	}
	return l
}

// ContextHandler wraps a slog.Handler and adds trace_id and span_id from the
// span in the record's context, and destination and table from
// WithDestination / WithTable.
type ContextHandler struct{ next slog.Handler }

// NewContextHandler wraps next.
func NewContextHandler(next slog.Handler) *ContextHandler { return &ContextHandler{next: next} }

// Enabled implements slog.Handler.
func (h *ContextHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

// Handle implements slog.Handler.
func (h *ContextHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
		}
		if d, ok := Destination(ctx); ok {
			r.AddAttrs(slog.String("destination", d))
		}
		if t, ok := Table(ctx); ok {
			r.AddAttrs(slog.String("table", t))
		}
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *ContextHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &ContextHandler{next: h.next.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (h *ContextHandler) WithGroup(name string) slog.Handler {
	return &ContextHandler{next: h.next.WithGroup(name)}
}
