package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/services/sluice/internal/jaeger"
	"github.com/sluice-cdc/sluice/shared/httpx"
)

// The web UI's trace view (/ui?trace=ID, drawn by ui_trace.js) reads
// GET /api/v1/traces/{id}: the trace and every trace joined to it by span
// links, as span trees, fetched server-side from Jaeger's query API
// (telemetry.jaeger_query, else telemetry.jaeger_ui), so the browser needs
// no Jaeger web assets and no route to Jaeger.

//go:embed ui_trace.js
var uiTraceJS []byte

func registerTraces(h *httpx.Server, a *handler) {
	h.Handle("GET /api/v1/traces/{id}", http.HandlerFunc(a.trace))
	h.Handle("GET /ui/trace.js", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(uiTraceJS)
	}))
}

// TraceView is the body of GET /api/v1/traces/{id}.
type TraceView struct {
	TraceID string `json:"trace_id"` // as asked
	// Start and End bound every span drawn (µs since the epoch): the
	// view's time axis.
	Start int64 `json:"start_us"`
	End   int64 `json:"end_us"`
	// Services are the services with spans here, in pipeline order
	// (reader, router, flusher, indexer, publisher, then any other).
	Services []string `json:"services"`
	// Traces are the joined traces, oldest first.
	Traces []TraceTree `json:"traces"`
	// Truncated: the join stopped at jaeger.MaxJoined traces.
	Truncated bool `json:"truncated,omitempty"`
	// JaegerUI is the external Jaeger UI (telemetry.jaeger_ui) that has
	// these traces too, "" when none is set.
	JaegerUI string `json:"jaeger_ui,omitempty"`
}

// TraceTree is one trace's spans in tree order (each parent before its
// children, siblings by start time), each with its depth.
type TraceTree struct {
	TraceID string `json:"trace_id"`
	// Asked is the trace the view was opened for.
	Asked bool       `json:"asked,omitempty"`
	Spans []ViewSpan `json:"spans"`
}

// ViewSpan is one span as the trace view draws it.
type ViewSpan struct {
	SpanID    string `json:"span_id"`
	ParentID  string `json:"parent_id,omitempty"`
	Depth     int    `json:"depth"`
	Service   string `json:"service"` // reader, router, flusher, indexer, publisher, or the process's name
	Process   string `json:"process"` // Jaeger's service name (sluice-dev, sluice-flusher, …)
	Operation string `json:"operation"`
	Start     int64  `json:"start_us"`
	Duration  int64  `json:"duration_us"`
	Error     bool   `json:"error,omitempty"`
	// Attributes are the span's tags, then its process's, sorted by key.
	Attributes []jaeger.KV `json:"attributes"`
	Events     []SpanEvent `json:"events,omitempty"`
	// Links are the spans of other traces this one links to.
	Links []jaeger.Ref `json:"links,omitempty"`
}

// SpanEvent is one event (a Jaeger log) of a span.
type SpanEvent struct {
	Time   int64       `json:"time_us"`
	Fields []jaeger.KV `json:"fields"`
}

// traceTimeout bounds one view: a join asks Jaeger a few dozen times.
const traceTimeout = 20 * time.Second

func (a *handler) trace(w http.ResponseWriter, r *http.Request) {
	id := strings.ToLower(r.PathValue("id"))
	if !jaeger.ValidTraceID(id) {
		a.fail(w, errors.Join(ErrBadRequest, fmt.Errorf("trace id %q: want up to 32 hex digits", id)))
		return
	}
	base := a.d.Config.Telemetry.QueryURL()
	if base == "" {
		writeJSON(w, http.StatusServiceUnavailable, Error{Error: "no Jaeger is configured to read traces from: set telemetry.jaeger_query " +
			"(SLUICE_TELEMETRY_JAEGER_QUERY) to its query API, e.g. http://127.0.0.1:16686, and telemetry.otlp_endpoint to its OTLP port (make run does both)"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), traceTimeout)
	defer cancel()
	set, err := jaeger.New(base).Joined(ctx, id)
	switch {
	case errors.Is(err, jaeger.ErrNoTrace):
		writeJSON(w, http.StatusNotFound, Error{Error: fmt.Sprintf("Jaeger at %s has no trace %s (it keeps traces in memory: a restarted Jaeger has lost older ones)", base, id)})
		return
	case errors.Is(err, jaeger.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded):
		writeJSON(w, http.StatusBadGateway, Error{Error: fmt.Sprintf("Jaeger's query API at %s (telemetry.jaeger_query) does not answer: %v", base, err)})
		return
	case err != nil:
		writeJSON(w, http.StatusBadGateway, Error{Error: err.Error()})
		return
	}
	v := buildView(id, set)
	v.JaegerUI = a.d.Config.Telemetry.JaegerUI
	writeJSON(w, http.StatusOK, v)
}

// buildView lays the joined traces out as the trace view draws them.
func buildView(id string, set map[string]jaeger.Trace) TraceView {
	v := TraceView{TraceID: id, Traces: []TraceTree{}, Truncated: len(set) >= jaeger.MaxJoined}
	trs := make([]jaeger.Trace, 0, len(set))
	for _, tr := range set {
		trs = append(trs, tr)
	}
	sort.Slice(trs, func(i, j int) bool {
		if a, b := trs[i].Start(), trs[j].Start(); a != b {
			return a < b
		}
		return trs[i].TraceID < trs[j].TraceID
	})
	seen := map[string]bool{}
	for _, tr := range trs {
		t := TraceTree{TraceID: tr.TraceID, Asked: sameTrace(tr.TraceID, id)}
		ids := map[string]bool{}
		for _, sp := range tr.Spans {
			ids[sp.SpanID] = true
		}
		children := map[string][]jaeger.Span{}
		for _, sp := range tr.Spans {
			children[sp.Parent(ids)] = append(children[sp.Parent(ids)], sp)
		}
		var walk func(parent string, depth int)
		walk = func(parent string, depth int) {
			kids := children[parent]
			sort.Slice(kids, func(i, j int) bool { return kids[i].StartTime < kids[j].StartTime })
			for _, sp := range kids {
				vs := viewSpan(tr, sp, parent, depth)
				seen[vs.Service] = true
				if v.Start == 0 || sp.StartTime < v.Start {
					v.Start = sp.StartTime
				}
				v.End = max(v.End, sp.StartTime+sp.Duration)
				t.Spans = append(t.Spans, vs)
				walk(sp.SpanID, depth+1)
			}
		}
		walk("", 0)
		v.Traces = append(v.Traces, t)
	}
	for _, s := range jaeger.Services {
		if seen[s] {
			v.Services = append(v.Services, s)
			delete(seen, s)
		}
	}
	var other []string
	for s := range seen {
		other = append(other, s)
	}
	sort.Strings(other)
	v.Services = append(v.Services, other...)
	return v
}

func viewSpan(tr jaeger.Trace, sp jaeger.Span, parent string, depth int) ViewSpan {
	p := tr.Processes[sp.ProcessID]
	vs := ViewSpan{SpanID: sp.SpanID, ParentID: parent, Depth: depth, Service: jaeger.StageOf(tr, sp), Process: p.ServiceName,
		Operation: sp.OperationName, Start: sp.StartTime, Duration: sp.Duration}
	vs.Attributes = append(append(vs.Attributes, sp.Tags...), p.Tags...)
	sort.SliceStable(vs.Attributes, func(i, j int) bool { return vs.Attributes[i].Key < vs.Attributes[j].Key })
	for _, kv := range sp.Tags {
		if (kv.Key == "error" && fmt.Sprint(kv.Value) == "true") || (kv.Key == "otel.status_code" && fmt.Sprint(kv.Value) == "ERROR") {
			vs.Error = true
		}
	}
	for _, l := range sp.Logs {
		vs.Events = append(vs.Events, SpanEvent{Time: l.Timestamp, Fields: l.Fields})
	}
	for _, r := range sp.References {
		if r.TraceID != tr.TraceID {
			vs.Links = append(vs.Links, jaeger.Ref{RefType: r.RefType, TraceID: r.TraceID, SpanID: r.SpanID})
		}
	}
	return vs
}

// sameTrace: Jaeger answers a trace id with or without its leading zeros.
func sameTrace(a, b string) bool {
	trim := func(s string) string {
		for len(s) > 1 && s[0] == '0' {
			s = s[1:]
		}
		return s
	}
	return trim(a) == trim(b)
}
