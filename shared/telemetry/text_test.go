package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluice-cdc/sluice/shared/config"
)

// TestLoggerKeepsEachKeyOnce: a service logger narrowed with
// With("service", ...) again, or a record repeating a With key, writes the
// key once, with the latest value, in JSON and in text.
func TestLoggerKeepsEachKeyOnce(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			log := NewLoggerTo(&buf, config.Telemetry{LogLevel: "info", LogFormat: format}, "router")
			log = log.With("service", "router", "slot", "a")
			log.With("slot", "b").Info("hello", "slot", "c", "n", 1)
			line := buf.String()
			if format == "json" {
				if n := strings.Count(line, `"service"`); n != 1 {
					t.Fatalf("service %d times: %s", n, line)
				}
				if n := strings.Count(line, `"slot"`); n != 1 || !strings.Contains(line, `"slot":"c"`) {
					t.Fatalf("slot not once with the latest value: %s", line)
				}
				var rec map[string]any
				if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
					t.Fatal(err)
				}
				return
			}
			if n := strings.Count(line, "router"); n != 1 || strings.Contains(line, "service=") {
				t.Fatalf("service not once, as the column: %q", line)
			}
			if n := strings.Count(line, "slot="); n != 1 || !strings.Contains(line, "slot=c") {
				t.Fatalf("slot not once with the latest value: %q", line)
			}
		})
	}
}

var textLine = regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO |WARN |ERROR) (\S+ +)?\S.*$`)

// TestTextHandler: one line per record for people: time, level, the
// service column, the message, then key=value with values quoted when
// needed, groups dotted, errors and durations in their text form, context
// fields included; colour only when asked.
func TestTextHandler(t *testing.T) {
	var buf bytes.Buffer
	log := NewLoggerTo(&buf, config.Telemetry{LogLevel: "debug", LogFormat: "text"}, "flusher")
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(WithDestination(context.Background(), "acme"), "s")
	defer span.End()
	log.With("partition", 3).WithGroup("pack").InfoContext(ctx, "pack written",
		"id", "p-1", "note", `two words "q"`, "eq", "a=b", "err", errors.New("disk full"), "took", 1500*time.Millisecond, "empty", "")
	log.Debug("partition claimed", "term", 7)
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines: %q", buf.String())
	}
	for _, l := range lines {
		if !textLine.MatchString(l) {
			t.Errorf("line %q is not time level service message", l)
		}
	}
	first := lines[0]
	for _, want := range []string{" INFO  flusher   pack written ", " partition=3", " pack.id=p-1", ` pack.note="two words \"q\""`,
		` pack.eq="a=b"`, " pack.err=\"disk full\"", " pack.took=1.5s", ` pack.empty=""`, " pack.destination=acme",
		" pack.trace_id=" + span.SpanContext().TraceID().String()} {
		if !strings.Contains(first, want) {
			t.Errorf("line %q lacks %q", first, want)
		}
	}
	if strings.Contains(buf.String(), "\x1b[") {
		t.Errorf("colour without a terminal: %q", buf.String())
	}
	if !strings.Contains(lines[1], " DEBUG flusher   partition claimed term=7") {
		t.Errorf("debug line %q", lines[1])
	}

	buf.Reset()
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "coloured", 0)
	r.Add("k", "v")
	if err := NewTextHandler(&buf, nil, true).Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "\x1b[36mINFO \x1b[0m") || !strings.Contains(buf.String(), "\x1b[2mk=\x1b[0mv") {
		t.Errorf("no colour when asked: %q", buf.String())
	}
}

// TestFormatChoice: auto is text on a terminal and JSON elsewhere; json
// and text force their format; NO_COLOR turns colour off.
func TestFormatChoice(t *testing.T) {
	var buf bytes.Buffer
	if WantText("auto", &buf) || WantText("", &buf) || !WantText("text", &buf) || WantText("json", &buf) {
		t.Fatal("a buffer is no terminal: auto and json must pick JSON, text text")
	}
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) || WantText("auto", f) || ColorFor(f) {
		t.Fatal("a regular file is no terminal")
	}
	// A terminal, when the test has one (the pty test of sluice dev
	// covers auto on a terminal end to end).
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if !WantText("auto", tty) || WantText("json", tty) {
			t.Fatal("auto on a terminal must pick text, json JSON")
		}
		t.Setenv("NO_COLOR", "1")
		if ColorFor(tty) {
			t.Fatal("NO_COLOR set, colour still on")
		}
	}
}
