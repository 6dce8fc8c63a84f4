package cli

// sluice trace --destination D | --trace ID: the span tree of a
// destination's latest flush, and of the traces joined to it by span links
// (the reader's and router's upstream, the indexer's and publisher's
// downstream), read from Jaeger's query API (telemetry.jaeger_ui).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

func newTraceCmd(g *globalFlags) *cobra.Command {
	var dest, traceID, jaeger string
	var lookback time.Duration
	cmd := &cobra.Command{
		Use:   "trace (--destination D | --trace ID)",
		Short: "Print the span tree of a destination's latest batch (reader to publisher) from Jaeger",
		Long: `Print the span tree of a destination's latest flush and of every trace joined to it by span
links: the reader and router spans of the changes it flushed, and the indexer and publisher
spans of the pack it wrote. Spans are read from Jaeger's query API at telemetry.jaeger_ui
(or --jaeger).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (dest == "") == (traceID == "") {
				return &exitError{2, errors.New("give --destination D or --trace ID")}
			}
			if dest != "" {
				if err := checkName(dest); err != nil {
					return err
				}
			}
			// Spans name a destination as telemetry.destination_names says.
			names := "plain"
			if cfg, err := config.Load(g.config, true); err == nil {
				names = cfg.Telemetry.DestinationNames
				if jaeger == "" {
					jaeger = cfg.Telemetry.JaegerUI
				}
			} else if jaeger == "" {
				return &exitError{2, fmt.Errorf("finding Jaeger: %w (or pass --jaeger)", err)}
			}
			if dest != "" && names == "omit" {
				return &exitError{2, errors.New("telemetry.destination_names is omit: spans do not name destinations; give --trace ID")}
			}
			if jaeger == "" {
				return &exitError{2, errors.New("no Jaeger to ask: set telemetry.jaeger_ui (SLUICE_TELEMETRY_JAEGER_UI) or pass --jaeger http://host:16686")}
			}
			j := &jaegerAPI{base: strings.TrimRight(jaeger, "/"), http: &http.Client{Timeout: 30 * time.Second}}
			ctx := cmd.Context()
			if dest != "" {
				id, err := j.latestFlush(ctx, telemetry.SpanDestination(names, dest), lookback)
				if err != nil {
					return err
				}
				traceID = id
			}
			set, err := j.joined(ctx, traceID, lookback)
			if err != nil {
				return err
			}
			printTraces(cmd.OutOrStdout(), traceID, set)
			return nil
		},
	}
	cmd.Flags().StringVar(&dest, "destination", "", "the destination whose latest flush to show (a destination name)")
	cmd.Flags().StringVar(&traceID, "trace", "", "a trace id to show instead")
	cmd.Flags().StringVar(&jaeger, "jaeger", "", "Jaeger's UI / query API base URL (default: telemetry.jaeger_ui)")
	cmd.Flags().DurationVar(&lookback, "lookback", time.Hour, "how far back to search")
	return cmd
}

// jTrace, jSpan: a trace as Jaeger's query API (/api/traces) returns it.
type jTrace struct {
	TraceID   string `json:"traceID"`
	Spans     []jSpan
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

type jSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"` // µs since the epoch
	Duration  int64 `json:"duration"`  // µs
	Tags      []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
}

func (s jSpan) tag(key string) (string, bool) {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value), true
		}
	}
	return "", false
}

type jaegerAPI struct {
	base string
	http *http.Client
}

func (j *jaegerAPI) get(ctx context.Context, path string, q url.Values) ([]jTrace, error) {
	u := j.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := j.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking Jaeger at %s: %w", j.base, err)
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
		Data []jTrace `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&r); err != nil {
		return nil, fmt.Errorf("reading Jaeger's answer to %s: %w", path, err)
	}
	return r.Data, nil
}

func (j *jaegerAPI) search(ctx context.Context, service string, tags map[string]string, lookback time.Duration, limit int) ([]jTrace, error) {
	now := time.Now()
	q := url.Values{"service": {service}, "limit": {fmt.Sprint(limit)},
		"start": {fmt.Sprint(now.Add(-lookback).UnixMicro())}, "end": {fmt.Sprint(now.Add(time.Minute).UnixMicro())}}
	if len(tags) > 0 {
		b, _ := json.Marshal(tags)
		q.Set("tags", string(b))
	}
	return j.get(ctx, "/api/traces", q)
}

// latestFlush finds the trace of dest's most recent flusher.flush span.
func (j *jaegerAPI) latestFlush(ctx context.Context, dest string, lookback time.Duration) (string, error) {
	var trs []jTrace
	for _, svc := range []string{"sluice-flusher", devService} {
		t, err := j.search(ctx, svc, map[string]string{"sluice.destination": dest}, lookback, 50)
		if err != nil {
			return "", err
		}
		trs = append(trs, t...)
	}
	best, at := "", int64(0)
	for _, tr := range trs {
		for _, sp := range tr.Spans {
			if d, ok := sp.tag("sluice.destination"); ok && d == dest && sp.OperationName == "flusher.flush" && sp.StartTime > at {
				best, at = tr.TraceID, sp.StartTime
			}
		}
	}
	if best == "" {
		return "", &exitError{1, fmt.Errorf("Jaeger at %s has no flush of destination %s in the last %s (is telemetry.otlp_endpoint set on the flusher?)", j.base, dest, lookback)}
	}
	return best, nil
}

// devService is the trace service name of `sluice dev`, which runs every
// service in one process under one tracer provider; `sluice run` and the
// per-service binaries name theirs sluice-<service>.
const devService = "sluice-dev"

// maxJoined bounds how many traces one answer joins.
const maxJoined = 200

// joined returns the trace id and every trace joined to it by span links,
// in either direction: the traces its spans link to (and theirs), and the
// indexer's and publisher's traces whose spans link to one of them.
func (j *jaegerAPI) joined(ctx context.Context, id string, lookback time.Duration) (map[string]jTrace, error) {
	set := map[string]jTrace{}
	queue := []string{id}
	seen := map[string]bool{id: true}
	fetchOne := func(id string) error {
		trs, err := j.get(ctx, "/api/traces/"+id, nil)
		if err != nil {
			return err
		}
		for _, tr := range trs {
			set[tr.TraceID] = tr
		}
		return nil
	}
	follow := func() error {
		for len(queue) > 0 && len(set) < maxJoined {
			id := queue[0]
			queue = queue[1:]
			if _, ok := set[id]; !ok {
				if err := fetchOne(id); err != nil {
					return err
				}
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
		return nil, &exitError{1, fmt.Errorf("Jaeger at %s has no trace %s", j.base, id)}
	}
	// Downstream: the pack's indexer and publisher spans link back.
	for _, svc := range []string{"sluice-indexer", "sluice-publisher", devService} {
		trs, err := j.search(ctx, svc, nil, lookback, 500)
		if err != nil {
			return nil, err
		}
		for changed := true; changed; {
			changed = false
			for _, tr := range trs {
				if _, ok := set[tr.TraceID]; ok {
					continue
				}
				if linksInto(tr, set) {
					set[tr.TraceID] = tr
					seen[tr.TraceID] = true
					queue = append(queue, tr.TraceID)
					changed = true
				}
			}
		}
		if err := follow(); err != nil {
			return nil, err
		}
	}
	return set, nil
}

// linksInto reports whether a span of tr refers to a trace in set.
func linksInto(tr jTrace, set map[string]jTrace) bool {
	for _, sp := range tr.Spans {
		for _, r := range sp.References {
			if _, ok := set[r.TraceID]; ok && r.TraceID != tr.TraceID {
				return true
			}
		}
	}
	return false
}

// printTraces writes each trace of set as an indented span tree, oldest
// first, the given trace marked: service, operation, duration, the
// messaging destination and sluice's attributes, and the traces each span
// links to.
func printTraces(w io.Writer, root string, set map[string]jTrace) {
	trs := make([]jTrace, 0, len(set))
	for _, tr := range set {
		trs = append(trs, tr)
	}
	start := func(tr jTrace) int64 {
		m := int64(0)
		for i, sp := range tr.Spans {
			if i == 0 || sp.StartTime < m {
				m = sp.StartTime
			}
		}
		return m
	}
	sort.Slice(trs, func(a, b int) bool { return start(trs[a]) < start(trs[b]) })
	services := map[string]bool{}
	for _, tr := range trs {
		mark := ""
		if tr.TraceID == root {
			mark = "  <- the flush"
		}
		fmt.Fprintf(w, "trace %s  %s%s\n", tr.TraceID, time.UnixMicro(start(tr)).UTC().Format("15:04:05.000"), mark)
		children := map[string][]jSpan{}
		ids := map[string]bool{}
		for _, sp := range tr.Spans {
			ids[sp.SpanID] = true
		}
		var tops []jSpan
		for _, sp := range tr.Spans {
			parent := ""
			for _, r := range sp.References {
				if r.RefType == "CHILD_OF" && r.TraceID == tr.TraceID && ids[r.SpanID] {
					parent = r.SpanID
				}
			}
			if parent == "" {
				tops = append(tops, sp)
			} else {
				children[parent] = append(children[parent], sp)
			}
		}
		var walk func(sp jSpan, depth int)
		walk = func(sp jSpan, depth int) {
			svc := stageOf(strings.TrimPrefix(tr.Processes[sp.ProcessID].ServiceName, "sluice-"), sp)
			services[svc] = true
			var extra []string
			for _, k := range []string{"messaging.destination.name", "sluice.destination", "sluice.rows", "sluice.packs", "sluice.version", "sluice.through_lsn"} {
				if v, ok := sp.tag(k); ok {
					extra = append(extra, strings.TrimPrefix(k, "sluice.")+"="+v)
				}
			}
			for _, r := range sp.References {
				if r.TraceID != tr.TraceID {
					extra = append(extra, "link->"+r.TraceID[:min(8, len(r.TraceID))])
				}
			}
			fmt.Fprintf(w, "%s%-9s %s  %s  %s\n", strings.Repeat("  ", depth+1), svc, sp.OperationName,
				(time.Duration(sp.Duration) * time.Microsecond).Round(time.Microsecond), strings.Join(extra, " "))
			kids := children[sp.SpanID]
			sort.Slice(kids, func(a, b int) bool { return kids[a].StartTime < kids[b].StartTime })
			for _, k := range kids {
				walk(k, depth+1)
			}
		}
		sort.Slice(tops, func(a, b int) bool { return tops[a].StartTime < tops[b].StartTime })
		for _, sp := range tops {
			walk(sp, 0)
		}
	}
	var names []string
	for _, s := range serviceNames {
		if services[s] {
			names = append(names, s)
		}
	}
	fmt.Fprintf(w, "%d traces; services: %s\n", len(trs), strings.Join(names, ", "))
}

// stageOf names the service a span belongs to. `sluice dev` runs every
// service in one process under one service name ("dev"), so there the
// span's instrumentation scope (services/<name>) or, without one, its
// operation says which.
func stageOf(svc string, sp jSpan) string {
	if svc != "dev" {
		return svc
	}
	for _, k := range []string{"otel.scope.name", "otel.library.name"} {
		if v, ok := sp.tag(k); ok {
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
