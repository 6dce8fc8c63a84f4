package natsx

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestHealthSaysUnavailable: with the server up every stream answers
// (gauge 1, nothing unavailable: the negative control); once JetStream
// stops answering, the gauge of every stream drops to 0, Unavailable
// names each with ErrJetStreamUnavailable, and one ERROR line per stream
// says so. (A lost cluster quorum is the same for a client: the stream
// does not answer; TestOracleCluster in test/e2e does it on a real
// three-node cluster.)
func TestHealthSaysUnavailable(t *testing.T) {
	j := startJS(t)
	var logs syncBuf
	reg := prometheus.NewRegistry()
	h := watchHealth(j.js, slog.New(slog.NewTextHandler(&logs, nil)), reg, 50*time.Millisecond)
	defer h.Stop()
	waitUntil(t, "a first check", func() bool { return checked(h) })
	if u := h.Unavailable(); len(u) != 0 {
		t.Fatalf("with the server up: unavailable %v", u)
	}
	if v := testutil.ToFloat64(h.gauge.WithLabelValues("CHANGES")); v != 1 {
		t.Fatalf("gauge %v with the server up", v)
	}
	j.srv.Shutdown()
	waitUntil(t, "every stream unavailable", func() bool { return len(h.Unavailable()) == len(Streams) })
	for s, e := range h.Unavailable() {
		if !strings.Contains(e, ErrJetStreamUnavailable.Error()) {
			t.Errorf("%s: %s does not say why", s, e)
		}
		if v := testutil.ToFloat64(h.gauge.WithLabelValues(s)); v != 0 {
			t.Errorf("%s: gauge %v while it does not answer", s, v)
		}
	}
	if n := strings.Count(logs.String(), "JetStream stream unavailable"); n != len(Streams) {
		t.Errorf("%d ERROR lines, want one per stream:\n%s", n, logs.String())
	}
}

// checked reports whether h has run at least one full check.
func checked(h *Health) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.checks > 0
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
