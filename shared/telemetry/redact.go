package telemetry

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluice-cdc/sluice/proto"
)

// tlsConfig is the OTLP link's TLS: the system's CAs, or the bundle in
// caFile.
func tlsConfig(caFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return tc, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading telemetry.otlp_tls_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("telemetry.otlp_tls_ca %s holds no PEM certificate", caFile)
	}
	tc.RootCAs = pool
	return tc, nil
}

// HashDestination is the pseudonym telemetry.destination_names: hash gives
// destination d in exported spans: "d:" and the first 16 hex digits of
// SHA-256 of the name. It is stable (`sluice trace --destination` finds
// the flushes it names) but not secret: whoever can guess a name can
// check it.
func HashDestination(d string) string {
	sum := sha256.Sum256([]byte("sluice.destination\x00" + d))
	return "d:" + hex.EncodeToString(sum[:8])
}

// SpanDestination is what an exported span says of destination d under
// mode (plain, hash or omit).
func SpanDestination(mode, d string) string {
	switch mode {
	case "hash":
		return HashDestination(d)
	case "omit":
		return ""
	}
	return d
}

// redactExporter wraps exp so that, unless mode is plain, no exported span
// names a destination: the sluice.destination attribute becomes its hash
// or is dropped, and the destination inside a packs or routed subject
// (messaging.destination.name) and inside a routed message id
// (messaging.message.id) is replaced the same way. It works on what is
// exported, so no span site can forget it.
func redactExporter(exp sdktrace.SpanExporter, mode string) sdktrace.SpanExporter {
	if mode == "" || mode == "plain" {
		return exp
	}
	return &redacting{SpanExporter: exp, mode: mode}
}

type redacting struct {
	sdktrace.SpanExporter
	mode string
}

func (r *redacting) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		out[i] = redactedSpan{ReadOnlySpan: s, attrs: r.attrs(s.Attributes())}
	}
	return r.SpanExporter.ExportSpans(ctx, out)
}

// redactedSpan is a span with other attributes (embedding the interface
// keeps every other method, the SDK's private one included).
type redactedSpan struct {
	sdktrace.ReadOnlySpan
	attrs []attribute.KeyValue
}

func (s redactedSpan) Attributes() []attribute.KeyValue { return s.attrs }

func (r *redacting) attrs(in []attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(in))
	for _, kv := range in {
		v := kv.Value.AsString()
		switch kv.Key {
		case "sluice.destination":
			if r.mode == "omit" {
				continue
			}
			kv = attribute.String(string(kv.Key), HashDestination(v))
		case "messaging.destination.name":
			kv = attribute.String(string(kv.Key), r.subject(v))
		case "messaging.message.id":
			kv = attribute.String(string(kv.Key), r.msgID(v))
		}
		out = append(out, kv)
	}
	return out
}

// subject replaces the destination of sluice.packs.<d> and
// sluice.routed.<partition>.<d>; other subjects name no destination
// (sluice.packs.<schema>.<table> is a segment's table, partition subjects
// a number).
func (r *redacting) subject(s string) string {
	if p, d, err := proto.ParseRoutedSubject(s); err == nil && d != "" {
		return strings.TrimSuffix(proto.RoutedSubject(p, d), d) + r.name(d)
	}
	const packs = "sluice.packs."
	if rest, ok := strings.CutPrefix(s, packs); ok && !strings.Contains(rest, ".") {
		return packs + r.name(rest)
	}
	return s
}

// msgID replaces the destination of a routed message id
// (proto.RoutedMsgID: r:<input id>:<destination>).
func (r *redacting) msgID(id string) string {
	i := strings.LastIndexByte(id, ':')
	if !strings.HasPrefix(id, "r:") || i < 2 || proto.ValidateDestination(id[i+1:]) != nil {
		return id
	}
	return id[:i+1] + r.name(id[i+1:])
}

func (r *redacting) name(d string) string {
	if r.mode == "omit" {
		return "-"
	}
	return HashDestination(d)
}
