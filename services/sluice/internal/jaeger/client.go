package jaeger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Trace is a trace as Jaeger's query API returns it.
type Trace struct {
	TraceID   string             `json:"traceID"`
	Spans     []Span             `json:"spans"`
	Processes map[string]Process `json:"processes"`
}

// Process is the emitter of spans: its service name and resource tags.
type Process struct {
	ServiceName string `json:"serviceName"`
	Tags        []KV   `json:"tags"`
}

// Span is one span of a Trace.
type Span struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []Ref  `json:"references"`
	StartTime     int64  `json:"startTime"` // µs since the epoch
	Duration      int64  `json:"duration"`  // µs
	Tags          []KV   `json:"tags"`
	Logs          []struct {
		Timestamp int64 `json:"timestamp"` // µs since the epoch
		Fields    []KV  `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
}

// Ref is a span's parent (CHILD_OF) or a span link (FOLLOWS_FROM, or
// CHILD_OF into another trace).
type Ref struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// KV is one attribute.
type KV struct {
	Key   string `json:"key"`
	Type  string `json:"type,omitempty"`
	Value any    `json:"value"`
}

// Tag returns the value of the attribute key as text.
func (s Span) Tag(key string) (string, bool) {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value), true
		}
	}
	return "", false
}

// Parent is the span's parent within its own trace, "" for a root.
func (s Span) Parent(ids map[string]bool) string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" && r.TraceID == s.TraceID && ids[r.SpanID] {
			return r.SpanID
		}
	}
	return ""
}

// Start is the start of the trace's earliest span, µs since the epoch.
func (t Trace) Start() int64 {
	m := int64(0)
	for i, sp := range t.Spans {
		if i == 0 || sp.StartTime < m {
			m = sp.StartTime
		}
	}
	return m
}

// Client asks one Jaeger's query API.
type Client struct {
	base string
	http *http.Client
}

// New returns a client of the query API at base (http://host:16686).
func New(base string) *Client {
	return &Client{base: strings.TrimRight(base, "/"), http: &http.Client{Timeout: 30 * time.Second}}
}

// Base is the query API's base URL.
func (c *Client) Base() string { return c.base }

var traceIDRE = regexp.MustCompile(`^[0-9a-fA-F]{1,32}$`)

// ValidTraceID reports whether id is a trace id Jaeger can be asked for:
// up to 32 hex digits (the 32 of a W3C traceparent's second field).
func ValidTraceID(id string) bool { return traceIDRE.MatchString(id) }

// maxAnswer bounds what one answer of Jaeger is read into memory.
const maxAnswer = 256 << 20

func (c *Client) get(ctx context.Context, path string, q url.Values) ([]Trace, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking Jaeger at %s: %w", c.base, errors.Join(ErrUnreachable, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, "/api/traces/") {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("asking Jaeger %s: %s %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	var r struct {
		Data []Trace `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(&r); err != nil {
		return nil, fmt.Errorf("reading Jaeger's answer to %s: %w", path, err)
	}
	return r.Data, nil
}

// Search is one search of the query API.
type Search struct {
	Service    string
	Operation  string            // "": any
	Tags       map[string]string // every one must match
	Start, End time.Time
	Limit      int
}

// Find runs a search.
func (c *Client) Find(ctx context.Context, s Search) ([]Trace, error) {
	q := url.Values{"service": {s.Service}, "limit": {fmt.Sprint(s.Limit)},
		"start": {fmt.Sprint(s.Start.UnixMicro())}, "end": {fmt.Sprint(s.End.UnixMicro())}}
	if s.Operation != "" {
		q.Set("operation", s.Operation)
	}
	if len(s.Tags) > 0 {
		b, _ := json.Marshal(s.Tags)
		q.Set("tags", string(b))
	}
	return c.get(ctx, "/api/traces", q)
}

// Trace returns one trace; ErrNoTrace when Jaeger has none of that id.
func (c *Client) Trace(ctx context.Context, id string) (Trace, error) {
	trs, err := c.get(ctx, "/api/traces/"+url.PathEscape(id), nil)
	if err != nil {
		return Trace{}, err
	}
	if len(trs) > 0 {
		return trs[0], nil
	}
	return Trace{}, fmt.Errorf("Jaeger at %s has no trace %s: %w", c.base, id, ErrNoTrace)
}

// DevService is the trace service name of `sluice dev`, which runs every
// service in one process under one tracer provider; `sluice run` and the
// per-service binaries name theirs sluice-<service>.
const DevService = "sluice-dev"

// LatestFlush finds the trace of dest's most recent flusher.flush span
// (dest as spans name it: telemetry.SpanDestination) in the last lookback.
func (c *Client) LatestFlush(ctx context.Context, dest string, lookback time.Duration) (string, error) {
	now := time.Now()
	var trs []Trace
	for _, svc := range []string{"sluice-flusher", DevService} {
		t, err := c.Find(ctx, Search{Service: svc, Operation: "flusher.flush", Tags: map[string]string{"sluice.destination": dest},
			Start: now.Add(-lookback), End: now.Add(time.Minute), Limit: 50})
		if err != nil {
			return "", err
		}
		trs = append(trs, t...)
	}
	best, at := "", int64(0)
	for _, tr := range trs {
		for _, sp := range tr.Spans {
			if d, ok := sp.Tag("sluice.destination"); ok && d == dest && sp.OperationName == "flusher.flush" && sp.StartTime > at {
				best, at = tr.TraceID, sp.StartTime
			}
		}
	}
	if best == "" {
		return "", fmt.Errorf("Jaeger at %s has no flush of destination %s in the last %s (is telemetry.otlp_endpoint set on the flusher?): %w", c.base, dest, lookback, ErrNoTrace)
	}
	return best, nil
}

// MaxJoined bounds how many traces one answer joins.
const MaxJoined = 200

// downstream are the searches that find the traces whose spans link back
// to a flush: the indexer's (as a process of its own) and the publisher's,
// which links every snapshot to the flushes of its packs.
var downstream = []Search{
	{Service: "sluice-indexer", Limit: 500},
	{Service: "sluice-publisher", Operation: "publisher.publish", Limit: 500},
	{Service: DevService, Operation: "publisher.publish", Limit: 500},
}

// downstreamWindow is how long after a trace starts the traces that link
// back to it are looked for: a pack is indexed and published within
// seconds of its flush unless the pipeline lags.
const downstreamWindow = 5 * time.Minute

// Joined returns the trace id and every trace joined to it by span links,
// in either direction: the traces its spans link to (and theirs: a
// flush's router and reader traces), and the indexer's and publisher's
// traces whose spans link to one of those (a snapshot's publish), without
// their other links.
// ErrNoTrace when Jaeger has no trace id.
func (c *Client) Joined(ctx context.Context, id string) (map[string]Trace, error) {
	set := map[string]Trace{}
	queue := []string{id}
	seen := map[string]bool{id: true}
	follow := func() error {
		for len(queue) > 0 && len(set) < MaxJoined {
			id := queue[0]
			queue = queue[1:]
			if _, ok := set[id]; !ok {
				tr, err := c.Trace(ctx, id)
				if errors.Is(err, ErrNoTrace) {
					continue // a link to a trace not (or no longer) stored
				}
				if err != nil {
					return err
				}
				set[tr.TraceID] = tr
				id = tr.TraceID
			}
			for _, sp := range set[id].Spans {
				for _, r := range sp.References {
					if !seen[r.TraceID] {
						seen[r.TraceID] = true
						queue = append(queue, r.TraceID)
					}
				}
			}
		}
		return nil
	}
	if err := follow(); err != nil {
		return nil, err
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("Jaeger at %s has no trace %s: %w", c.base, id, ErrNoTrace)
	}
	up := maps.Clone(set)
	t0 := time.UnixMicro(set[firstKey(set, id)].Start())
	for _, s := range downstream {
		s.Start, s.End = t0.Add(-time.Second), t0.Add(downstreamWindow)
		trs, err := c.Find(ctx, s)
		if err != nil {
			return nil, err
		}
		// Their own links are not followed: a snapshot's publish links to
		// the flushes of every destination it published.
		for _, tr := range trs {
			if _, ok := set[tr.TraceID]; !ok && len(set) < MaxJoined && linksInto(tr, up) {
				set[tr.TraceID] = tr
			}
		}
	}
	return set, nil
}

// firstKey is the key of set that id names (ids may be asked for without
// their leading zeros).
func firstKey(set map[string]Trace, id string) string {
	for k := range set {
		if strings.EqualFold(k, id) || strings.HasSuffix(strings.ToLower(k), strings.ToLower(id)) {
			return k
		}
	}
	for k := range set {
		return k
	}
	return ""
}

// linksInto reports whether a span of tr refers to a trace in set.
func linksInto(tr Trace, set map[string]Trace) bool {
	for _, sp := range tr.Spans {
		for _, r := range sp.References {
			if _, ok := set[r.TraceID]; ok && r.TraceID != tr.TraceID {
				return true
			}
		}
	}
	return false
}

// Services are the five services, in pipeline order.
var Services = []string{"reader", "router", "flusher", "indexer", "publisher"}

// StageOf names the service a span of tr belongs to: reader, router,
// flusher, indexer or publisher when it can tell, else the process's
// service name without its "sluice-" prefix. `sluice dev` runs every
// service in one process under one service name, so there the span's
// instrumentation scope (services/<name>) or, without one, its operation
// says which.
func StageOf(tr Trace, sp Span) string {
	svc := strings.TrimPrefix(tr.Processes[sp.ProcessID].ServiceName, "sluice-")
	if svc != "dev" {
		return svc
	}
	for _, k := range []string{"otel.scope.name", "otel.library.name"} {
		if v, ok := sp.Tag(k); ok {
			if _, rest, ok := strings.Cut(v, "/services/"); ok {
				name, _, _ := strings.Cut(rest, "/")
				return name
			}
		}
	}
	op := sp.OperationName
	switch {
	case strings.HasPrefix(op, "publish sluice.changes"):
		return "reader"
	case strings.HasPrefix(op, "route ") || op == "process router":
		return "router"
	case strings.HasPrefix(op, "flusher."):
		return "flusher"
	case strings.HasPrefix(op, "indexer.") || op == "process indexer":
		return "indexer"
	case strings.HasPrefix(op, "publisher."):
		return "publisher"
	}
	return svc
}
