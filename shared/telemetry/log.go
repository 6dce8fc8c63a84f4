package telemetry

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/term"

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

// NewLogger returns the service's logger to stdout at cfg.LogLevel, in the
// format LogFormat picks (see NewLoggerTo), with service=<service> on every
// record and the context fields added by ContextHandler.
func NewLogger(cfg config.Telemetry, service string) *slog.Logger {
	return NewLoggerTo(os.Stdout, cfg, service)
}

// NewLoggerTo is NewLogger writing to w. LogFormat json writes JSON lines;
// text writes lines for people (TextHandler); auto (or empty) writes text
// when w is a terminal and JSON otherwise. Text is coloured when w is a
// terminal that supports colour and NO_COLOR is unset.
func NewLoggerTo(w io.Writer, cfg config.Telemetry, service string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: ParseLevel(cfg.LogLevel)}
	var h slog.Handler
	if WantText(cfg.LogFormat, w) {
		h = NewTextHandler(w, opts.Level, ColorFor(w))
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	l := slog.New(NewContextHandler(h))
	if service != "" {
		l = l.With("service", service)
	}
	return l
}

// WantText reports whether a log_format writes text to w: text always,
// json never, auto (or empty) when w is a terminal.
func WantText(format string, w io.Writer) bool {
	switch strings.ToLower(format) {
	case "text":
		return true
	case "json":
		return false
	}
	return IsTerminal(w)
}

// IsTerminal reports whether w is a file open on a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// ColorFor reports whether text written to w may carry ANSI colours: w is
// a terminal, NO_COLOR (https://no-color.org) is unset or empty, and TERM
// is not "dumb".
func ColorFor(w io.Writer) bool {
	return IsTerminal(w) && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
}

// ContextHandler wraps a slog.Handler and adds trace_id and span_id from the
// span in the record's context, and destination and table from
// WithDestination / WithTable. It also keeps each key once: the attributes
// given to With and to the record are merged with a later value of a key
// replacing an earlier one (a service logger that a component narrows with
// With("service", ...) again writes service once).
type ContextHandler struct {
	next  slog.Handler
	attrs []slog.Attr // With attributes not yet handed to next (since the last group)
}

// NewContextHandler wraps next.
func NewContextHandler(next slog.Handler) *ContextHandler { return &ContextHandler{next: next} }

// Enabled implements slog.Handler.
func (h *ContextHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

// Handle implements slog.Handler.
func (h *ContextHandler) Handle(ctx context.Context, r slog.Record) error {
	attrs := make([]slog.Attr, 0, len(h.attrs)+r.NumAttrs()+4)
	attrs = append(attrs, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, a)
		return true
	})
	if ctx != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
		}
		if d, ok := Destination(ctx); ok {
			attrs = append(attrs, slog.String("destination", d))
		}
		if t, ok := Table(ctx); ok {
			attrs = append(attrs, slog.String("table", t))
		}
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(dedupe(attrs)...)
	return h.next.Handle(ctx, out)
}

// dedupe keeps the last value of each key, at the position of its first
// appearance; empty attributes are dropped.
func dedupe(attrs []slog.Attr) []slog.Attr {
	at := make(map[string]int, len(attrs))
	out := attrs[:0:0]
	for _, a := range attrs {
		if a.Equal(slog.Attr{}) {
			continue
		}
		if i, ok := at[a.Key]; ok {
			out[i] = a
			continue
		}
		at[a.Key] = len(out)
		out = append(out, a)
	}
	return out
}

// WithAttrs implements slog.Handler.
func (h *ContextHandler) WithAttrs(as []slog.Attr) slog.Handler {
	attrs := make([]slog.Attr, 0, len(h.attrs)+len(as))
	return &ContextHandler{next: h.next, attrs: dedupe(append(append(attrs, h.attrs...), as...))}
}

// WithGroup implements slog.Handler: the attributes so far are handed to
// next, outside the group.
func (h *ContextHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	next := h.next
	if len(h.attrs) > 0 {
		next = next.WithAttrs(h.attrs)
	}
	return &ContextHandler{next: next.WithGroup(name)}
}
