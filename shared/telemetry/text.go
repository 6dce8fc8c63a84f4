package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// TextHandler writes one line per record for a person at a terminal:
//
//	15:04:05.000 INFO  flusher   pack written partition=3 rows=120
//
// time (local, milliseconds), level, the service attribute as a column,
// the message, then the other attributes as key=value (values quoted when
// they hold spaces, quotes or '='; groups as dotted keys). With color the
// level is coloured, the service bold and the keys dim.
type TextHandler struct {
	w      io.Writer
	mu     *sync.Mutex
	level  slog.Leveler
	color  bool
	prefix string      // open groups, "a.b."
	attrs  []slog.Attr // With attributes, keys already prefixed
}

// NewTextHandler returns a TextHandler writing to w at level.
func NewTextHandler(w io.Writer, level slog.Leveler, color bool) *TextHandler {
	if level == nil {
		level = slog.LevelInfo
	}
	return &TextHandler{w: w, mu: &sync.Mutex{}, level: level, color: color}
}

// Enabled implements slog.Handler.
func (h *TextHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

// WithAttrs implements slog.Handler.
func (h *TextHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), prefixed(h.prefix, as)...)
	return &c
}

// WithGroup implements slog.Handler.
func (h *TextHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

func prefixed(prefix string, as []slog.Attr) []slog.Attr {
	if prefix == "" {
		return as
	}
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = slog.Attr{Key: prefix + a.Key, Value: a.Value}
	}
	return out
}

const (
	ansiReset = "\x1b[0m"
	ansiBold  = "\x1b[1m"
	ansiDim   = "\x1b[2m"
)

func levelColor(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "\x1b[31m" // red
	case l >= slog.LevelWarn:
		return "\x1b[33m" // yellow
	case l >= slog.LevelInfo:
		return "\x1b[36m" // cyan
	}
	return "\x1b[90m" // grey
}

// Handle implements slog.Handler.
func (h *TextHandler) Handle(_ context.Context, r slog.Record) error {
	var b bytes.Buffer
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b.WriteString(t.Format("15:04:05.000"))
	b.WriteByte(' ')
	lvl := fmt.Sprintf("%-5s", r.Level.String())
	h.paint(&b, levelColor(r.Level), lvl)
	all := append([]slog.Attr(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		all = append(all, slog.Attr{Key: h.prefix + a.Key, Value: a.Value})
		return true
	})
	service := ""
	rest := all[:0:0]
	for _, a := range all {
		if a.Key == "service" {
			service = a.Value.Resolve().String()
			continue
		}
		rest = append(rest, a)
	}
	if service != "" {
		b.WriteByte(' ')
		h.paint(&b, ansiBold, fmt.Sprintf("%-9s", service))
	}
	b.WriteByte(' ')
	b.WriteString(r.Message)
	for _, a := range rest {
		h.writeAttr(&b, "", a)
	}
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(b.Bytes())
	return err
}

func (h *TextHandler) writeAttr(b *bytes.Buffer, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			h.writeAttr(b, p, g)
		}
		return
	}
	b.WriteByte(' ')
	h.paint(b, ansiDim, prefix+a.Key+"=")
	b.WriteString(quoteIfNeeded(textOf(v)))
}

func textOf(v slog.Value) string {
	switch v.Kind() {
	case slog.KindTime:
		return v.Time().Format(time.RFC3339Nano)
	case slog.KindDuration:
		return v.Duration().String()
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return err.Error()
		}
		return fmt.Sprint(v.Any())
	}
	return v.String()
}

// quoteIfNeeded quotes s when it is empty or holds a space, a quote, '='
// or a control or non-printable character, so a line splits back into its
// key=value pairs.
func quoteIfNeeded(s string) string {
	if s == "" {
		return `""`
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || r == '=' || r == '"' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
		i += n
	}
	return s
}

func (h *TextHandler) paint(b *bytes.Buffer, code, s string) {
	if !h.color {
		b.WriteString(s)
		return
	}
	b.WriteString(code)
	b.WriteString(s)
	b.WriteString(ansiReset)
}
