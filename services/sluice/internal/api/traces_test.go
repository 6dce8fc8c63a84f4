package api

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
)

// fakeJaeger answers Jaeger's query API the way v1.75's all-in-one does
// (/api/traces/{id}, /api/traces?service=&operation=), from three traces
// of `sluice dev`: a reader trace (the reader's publish, the router's
// route as its child), a flush trace linking to it (the flusher's flush,
// the indexer's process as its child) and a publisher trace linking to
// the flush and to another destination's flush, which is not the asked
// flush's business. The real Jaeger is test/ui's TestTraceView.
func fakeJaeger(t *testing.T) *httptest.Server {
	t0 := time.Now().Add(-time.Minute).UnixMicro()
	proc := map[string]any{"p1": map[string]any{"serviceName": "sluice-dev", "tags": []any{map[string]any{"key": "host.name", "type": "string", "value": "box"}}}}
	span := func(trace, id, op, scope string, start, dur int64, refs ...map[string]string) map[string]any {
		r := []any{}
		for _, x := range refs {
			r = append(r, x)
		}
		return map[string]any{"traceID": trace, "spanID": id, "operationName": op, "startTime": t0 + start, "duration": dur, "processID": "p1",
			"references": r, "tags": []any{map[string]any{"key": "otel.scope.name", "type": "string", "value": "github.com/sluice-cdc/sluice/services/" + scope},
				map[string]any{"key": "sluice.destination", "type": "string", "value": "acme"}}}
	}
	ref := func(kind, trace, span string) map[string]string {
		return map[string]string{"refType": kind, "traceID": trace, "spanID": span}
	}
	const reader, flush, publish, other = "0000000000000000000000000000aaaa", "0000000000000000000000000000bbbb", "0000000000000000000000000000cccc", "0000000000000000000000000000dddd"
	traces := map[string]map[string]any{
		reader: {"traceID": reader, "processes": proc, "spans": []any{
			span(reader, "a1", "publish sluice.changes.public.orders", "reader", 0, 900),
			span(reader, "a2", "route sluice.changes.public.orders", "router", 300, 400, ref("CHILD_OF", reader, "a1")),
		}},
		flush: {"traceID": flush, "processes": proc, "spans": []any{
			span(flush, "b1", "flusher.flush", "flusher", 2000, 5000, ref("FOLLOWS_FROM", reader, "a2")),
			span(flush, "b2", "process indexer", "indexer", 8000, 1000, ref("CHILD_OF", flush, "b1")),
		}},
		publish: {"traceID": publish, "processes": proc, "spans": []any{
			span(publish, "c1", "publisher.publish", "publisher", 9500, 300, ref("FOLLOWS_FROM", flush, "b1"), ref("FOLLOWS_FROM", other, "d1")),
		}},
		other: {"traceID": other, "processes": proc, "spans": []any{
			span(other, "d1", "flusher.flush", "flusher", 2500, 4000),
		}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if id, ok := strings.CutPrefix(r.URL.Path, "/api/traces/"); ok {
			tr, ok := traces[id]
			if !ok {
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `{"data":null,"errors":[{"code":404,"msg":"trace not found"}]}`)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"data": []any{tr}})
			return
		}
		if r.URL.Path == "/api/traces" {
			var out []any
			if q := r.URL.Query(); q.Get("service") == "sluice-dev" && q.Get("operation") == "publisher.publish" {
				out = append(out, traces[publish])
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"data": out})
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// traceServer is the API as a process serves it: behind httpx's token
// guard, with telemetry.jaeger_query set to query ("" for none).
func traceServer(t *testing.T, token, query string) http.Handler {
	cfg := config.Default()
	cfg.Telemetry.JaegerQuery = query
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", token, nil, log)
	Register(h, Deps{Config: cfg, Log: log})
	return h.Handler()
}

func get(t *testing.T, h http.Handler, path, token string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080"+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// GET /api/v1/traces/{id}: the trace and the traces joined to it by span
// links, as span trees with each span's service; an unknown id is a 404
// naming it, a Jaeger that does not answer or is not configured is a
// clear error, and the route is behind the API's token.
func TestTraceRoute(t *testing.T) {
	j := fakeJaeger(t)
	h := traceServer(t, "s3cret", j.URL)

	code, body := get(t, h, "/api/v1/traces/0000000000000000000000000000bbbb", "s3cret")
	if code != http.StatusOK {
		t.Fatalf("GET a flush's trace: %d %s", code, body)
	}
	var v TraceView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(v.Services, ","); got != "reader,router,flusher,indexer,publisher" {
		t.Errorf("services %q, want all five in pipeline order", got)
	}
	if len(v.Traces) != 3 || !v.Traces[1].Asked || v.Traces[0].Asked {
		t.Fatalf("traces %+v: want the reader's, the flush (asked), the publisher's, oldest first, not the other flush the publish links to", v.Traces)
	}
	var tree []string
	for _, tr := range v.Traces {
		for _, s := range tr.Spans {
			tree = append(tree, fmt.Sprintf("%s%s:%s", strings.Repeat(" ", s.Depth), s.Service, s.Operation))
		}
	}
	want := []string{"reader:publish sluice.changes.public.orders", " router:route sluice.changes.public.orders",
		"flusher:flusher.flush", " indexer:process indexer", "publisher:publisher.publish"}
	if strings.Join(tree, "|") != strings.Join(want, "|") {
		t.Errorf("span tree\n%s\nwant\n%s", strings.Join(tree, "\n"), strings.Join(want, "\n"))
	}
	fl := v.Traces[1].Spans[0]
	if len(fl.Links) != 1 || fl.Links[0].TraceID != v.Traces[0].TraceID || fl.Duration != 5000 || v.End-v.Start != 9800 {
		t.Errorf("flush span %+v; view %d..%d", fl, v.Start, v.End)
	}
	if !strings.Contains(body, `"key":"sluice.destination"`) || !strings.Contains(body, `"key":"host.name"`) {
		t.Errorf("the spans lack their attributes and their process's: %s", body)
	}

	for _, c := range []struct {
		name, path, token string
		code              int
		says              string
	}{
		{"unknown id", "/api/v1/traces/0123456789abcdef0123456789abcdef", "s3cret", http.StatusNotFound, "has no trace 0123456789abcdef0123456789abcdef"},
		{"not an id", "/api/v1/traces/zz-top", "s3cret", http.StatusBadRequest, "want up to 32 hex digits"},
		{"no token", "/api/v1/traces/0000000000000000000000000000bbbb", "", http.StatusUnauthorized, ""},
		{"wrong token", "/api/v1/traces/0000000000000000000000000000bbbb", "guess", http.StatusUnauthorized, ""},
		{"no token for the view's script", "/ui/trace.js", "", http.StatusUnauthorized, ""},
	} {
		code, body := get(t, h, c.path, c.token)
		if code != c.code || !strings.Contains(body, c.says) || (c.code == http.StatusUnauthorized && strings.Contains(body, "flusher")) {
			t.Errorf("%s: %d %s; want %d saying %q", c.name, code, body, c.code, c.says)
		}
	}
	if code, body := get(t, h, "/ui/trace.js", "s3cret"); code != http.StatusOK || !strings.Contains(body, "sluiceTrace") {
		t.Errorf("/ui/trace.js: %d", code)
	}

	// A Jaeger that is down: a port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	_ = ln.Close()
	code, body = get(t, traceServer(t, "", down), "/api/v1/traces/0000000000000000000000000000bbbb", "")
	if code != http.StatusBadGateway || !strings.Contains(body, "query API at "+down) || !strings.Contains(body, "does not answer") {
		t.Errorf("Jaeger down: %d %s; want 502 naming it", code, body)
	}
	code, body = get(t, traceServer(t, "", ""), "/api/v1/traces/0000000000000000000000000000bbbb", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "set telemetry.jaeger_query") {
		t.Errorf("no Jaeger configured: %d %s; want 503 saying how to set one", code, body)
	}
}
