package cli

// sluice trace --destination D | --trace ID: the span tree of a
// destination's latest flush, and of the traces joined to it by span links
// (the reader's and router's upstream, the indexer's and publisher's
// downstream), read from Jaeger's query API (telemetry.jaeger_query, or
// telemetry.jaeger_ui) by package jaeger, which the web UI's trace view
// reads through too.

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/services/sluice/internal/jaeger"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

func newTraceCmd(g *globalFlags) *cobra.Command {
	var dest, traceID, query string
	var lookback time.Duration
	cmd := &cobra.Command{
		Use:   "trace (--destination D | --trace ID)",
		Short: "Print the span tree of a destination's latest batch (reader to publisher) from Jaeger",
		Long: `Print the span tree of a destination's latest flush and of every trace joined to it by span
links: the reader and router spans of the changes it flushed, and the indexer and publisher
spans of the pack it wrote. Spans are read from Jaeger's query API at telemetry.jaeger_query
(default: telemetry.jaeger_ui), or --jaeger. The web UI shows the same at /ui?trace=ID.`,
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
			if traceID != "" && !jaeger.ValidTraceID(traceID) {
				return &exitError{2, fmt.Errorf("--trace %q: want a trace id of up to 32 hex digits", traceID)}
			}
			// Spans name a destination as telemetry.destination_names says.
			names := "plain"
			if cfg, err := config.Load(g.config, true); err == nil {
				names = cfg.Telemetry.DestinationNames
				if query == "" {
					query = cfg.Telemetry.QueryURL()
				}
			} else if query == "" {
				return &exitError{2, fmt.Errorf("finding Jaeger: %w (or pass --jaeger)", err)}
			}
			if dest != "" && names == "omit" {
				return &exitError{2, errors.New("telemetry.destination_names is omit: spans do not name destinations; give --trace ID")}
			}
			if query == "" {
				return &exitError{2, errors.New("no Jaeger to ask: set telemetry.jaeger_query or telemetry.jaeger_ui (SLUICE_TELEMETRY_JAEGER_QUERY, SLUICE_TELEMETRY_JAEGER_UI) or pass --jaeger http://host:16686")}
			}
			j := jaeger.New(query)
			ctx := cmd.Context()
			if dest != "" {
				id, err := j.LatestFlush(ctx, telemetry.SpanDestination(names, dest), lookback)
				if err != nil {
					return notFound(err)
				}
				traceID = id
			}
			set, err := j.Joined(ctx, traceID)
			if err != nil {
				return notFound(err)
			}
			printTraces(cmd.OutOrStdout(), traceID, set)
			return nil
		},
	}
	cmd.Flags().StringVar(&dest, "destination", "", "the destination whose latest flush to show (a destination name)")
	cmd.Flags().StringVar(&traceID, "trace", "", "a trace id to show instead")
	cmd.Flags().StringVar(&query, "jaeger", "", "Jaeger's query API base URL (default: telemetry.jaeger_query, else telemetry.jaeger_ui)")
	cmd.Flags().DurationVar(&lookback, "lookback", time.Hour, "how far back to search for the destination's latest flush")
	return cmd
}

// notFound exits 1 when Jaeger has no such trace or flush, with the error
// as it is otherwise.
func notFound(err error) error {
	if errors.Is(err, jaeger.ErrNoTrace) {
		return &exitError{1, err}
	}
	return err
}

// printTraces writes each trace of set as an indented span tree, oldest
// first, the given trace marked: service, operation, duration, the
// messaging destination and sluice's attributes, and the traces each span
// links to.
func printTraces(w io.Writer, root string, set map[string]jaeger.Trace) {
	trs := make([]jaeger.Trace, 0, len(set))
	for _, tr := range set {
		trs = append(trs, tr)
	}
	sort.Slice(trs, func(a, b int) bool { return trs[a].Start() < trs[b].Start() })
	services := map[string]bool{}
	for _, tr := range trs {
		mark := ""
		if tr.TraceID == root {
			mark = "  <- the flush"
		}
		fmt.Fprintf(w, "trace %s  %s%s\n", tr.TraceID, time.UnixMicro(tr.Start()).UTC().Format("15:04:05.000"), mark)
		children := map[string][]jaeger.Span{}
		ids := map[string]bool{}
		for _, sp := range tr.Spans {
			ids[sp.SpanID] = true
		}
		var tops []jaeger.Span
		for _, sp := range tr.Spans {
			parent := sp.Parent(ids)
			if parent == "" {
				tops = append(tops, sp)
			} else {
				children[parent] = append(children[parent], sp)
			}
		}
		var walk func(sp jaeger.Span, depth int)
		walk = func(sp jaeger.Span, depth int) {
			svc := jaeger.StageOf(tr, sp)
			services[svc] = true
			var extra []string
			for _, k := range []string{"messaging.destination.name", "sluice.destination", "sluice.rows", "sluice.packs", "sluice.version", "sluice.through_lsn"} {
				if v, ok := sp.Tag(k); ok {
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
