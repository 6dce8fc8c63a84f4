package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/httpx"
)

// pinReads is a Reads that only pins, and remembers what it pinned.
type pinReads struct {
	mu   sync.Mutex
	pins map[uint64]string
}

func (p *pinReads) Snapshots(context.Context, SnapshotsQuery) (SnapshotsPage, error) {
	return SnapshotsPage{}, nil
}

func (p *pinReads) Rows(context.Context, RowsQuery) (RowsPage, error) { return RowsPage{}, nil }

func (p *pinReads) Pin(_ context.Context, v uint64, reason string) (Pin, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pins[v] = reason
	return Pin{Version: v, Pinned: true, Reason: reason}, nil
}

func (p *pinReads) Unpin(_ context.Context, v uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pins, v)
	return nil
}

func (p *pinReads) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pins)
}

// actionRoutes are every route that changes state: the status page's
// buttons call exactly these.
var actionRoutes = []struct{ method, path string }{
	{"POST", "/api/v1/destinations/shop1/pause"},
	{"POST", "/api/v1/destinations/shop1/resume"},
	{"POST", "/api/v1/destinations/shop1/drain"},
	{"POST", "/api/v1/destinations/shop1/retire"},
	{"POST", "/api/v1/destinations/pause?destination=shop1"},
	{"POST", "/api/v1/destinations/shop1/purge"},
	{"POST", "/api/v1/resyncs"},
	{"POST", "/api/v1/snapshots/7/pin"},
	{"POST", "/api/v1/snapshots/7/unpin"},
	{"POST", "/api/v1/dlq/1/replay"},
	{"POST", "/api/v1/dlq/replay"},
	{"DELETE", "/api/v1/dlq/1"},
	{"POST", "/api/v1/dlq/purge"},
}

// TestActionGuard: every route that changes state, behind a token, refuses
// what a page of another site can send — a form post, a fetch (even one
// that carried the client header, as if a preflight had been granted),
// one from another port of localhost, one from an older browser that sends
// only Origin — and a same-origin call without the token; the status
// page's own call (same origin, the token as the browser's Basic password,
// the client header) is accepted and takes effect.
func TestActionGuard(t *testing.T) {
	checkLeaks(t)
	e := newDLQEnv(t)
	reads := &pinReads{pins: map[uint64]string{}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "tok", prometheus.NewRegistry(), log)
	Register(h, Deps{Log: log, Reads: reads, JS: e.js})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("ui:tok"))

	type req struct {
		name    string
		hdr     map[string]string
		body    string
		want    int    // the status
		message string // in the body
	}
	sameOrigin := map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": srv.URL, "Authorization": basic, ClientHeader: "sluice-ui", "Content-Type": "application/json"}
	with := func(over map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range sameOrigin {
			out[k] = v
		}
		for k, v := range over {
			if v == "" {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
		return out
	}
	refusals := []req{
		{name: "cross-site form post", hdr: with(map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example", ClientHeader: "", "Content-Type": "application/x-www-form-urlencoded"}),
			body: "reason=x", want: http.StatusForbidden, message: "send the " + ClientHeader},
		{name: "cross-site fetch with the client header", hdr: with(map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}),
			want: http.StatusForbidden, message: "Sec-Fetch-Site: cross-site"},
		{name: "another port of localhost", hdr: with(map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"}),
			want: http.StatusForbidden, message: "Sec-Fetch-Site: same-site"},
		{name: "older browser, foreign Origin", hdr: with(map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}),
			want: http.StatusForbidden, message: "evil.example"},
		{name: "same origin without the token", hdr: with(map[string]string{"Authorization": ""}),
			want: http.StatusUnauthorized, message: "unauthorized"},
		{name: "same origin with a wrong token", hdr: with(map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("ui:nope"))}),
			want: http.StatusUnauthorized, message: "unauthorized"},
	}
	do := func(method, path string, r req) (int, string) {
		t.Helper()
		hr, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(r.body))
		for k, v := range r.hdr {
			hr.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	seq := e.deadLetter(t, proto.StreamRouted, proto.RoutedSubject(3, "shop1"), "flusher", "bad", arrowBody(t), routedHeader())
	dlqCount := func() int {
		var list []DLQEntry
		code, body := do("GET", "/api/v1/dlq", req{hdr: map[string]string{"Authorization": basic}})
		if code != 200 || json.Unmarshal([]byte(body), &list) != nil {
			t.Fatalf("GET /api/v1/dlq: %d %s", code, body)
		}
		return len(list)
	}
	for _, rt := range actionRoutes {
		for _, r := range refusals {
			if code, body := do(rt.method, rt.path, r); code != r.want || !strings.Contains(body, r.message) {
				t.Errorf("%s %s, %s: %d %s, want %d with %q", rt.method, rt.path, r.name, code, strings.TrimSpace(body), r.want, r.message)
			}
		}
		// No CORS preflight is ever granted.
		pre := req{hdr: map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": rt.method, "Access-Control-Request-Headers": ClientHeader}}
		hr, _ := http.NewRequest(http.MethodOptions, srv.URL+rt.path, nil)
		for k, v := range pre.hdr {
			hr.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 300 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("OPTIONS %s: %d, Access-Control-Allow-Origin %q: a preflight was granted", rt.path, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
	if n := reads.count(); n != 0 {
		t.Fatalf("a refused request pinned: %v", reads.pins)
	}
	if n := dlqCount(); n != 1 {
		t.Fatalf("a refused request changed the DLQ: %d dead letters, want 1", n)
	}

	// The status page's own calls pass and take effect; those whose
	// process lacks what they need pass the guard and say so.
	ok := req{hdr: sameOrigin, body: `{"reason": "audit"}`}
	if code, body := do("POST", "/api/v1/snapshots/7/pin", ok); code != 200 || reads.pins[7] != "audit" {
		t.Fatalf("same-origin pin: %d %s, pins %v", code, body, reads.pins)
	}
	if code, body := do("POST", "/api/v1/snapshots/7/unpin", req{hdr: sameOrigin}); code != 200 || reads.count() != 0 {
		t.Fatalf("same-origin unpin: %d %s, pins %v", code, body, reads.pins)
	}
	// The CLI's calls: no browser header at all.
	cli := req{hdr: map[string]string{"Authorization": "Bearer tok", ClientHeader: "sluice-cli"}}
	if code, body := do("POST", "/api/v1/snapshots/8/pin", cli); code != 200 || reads.count() != 1 {
		t.Fatalf("the CLI's pin: %d %s", code, body)
	}
	if code, body := do("DELETE", "/api/v1/dlq/"+itoa(seq), req{hdr: sameOrigin}); code != 200 || dlqCount() != 0 {
		t.Fatalf("same-origin purge of dead letter %d: %d %s", seq, code, body)
	}
	for _, path := range []string{"/api/v1/destinations/shop1/pause", "/api/v1/resyncs"} {
		if code, body := do("POST", path, ok); code != http.StatusServiceUnavailable || !strings.Contains(body, "no state database") {
			t.Errorf("same-origin POST %s: %d %s, want past the guard (503: no state database here)", path, code, body)
		}
	}
}
