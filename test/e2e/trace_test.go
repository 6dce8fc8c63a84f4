package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

var fiveServices = []string{"reader", "router", "flusher", "indexer", "publisher"}

// serviceOf maps a Jaeger service name to one of the five.
func serviceOf(name string) string {
	for _, s := range fiveServices {
		if strings.Contains(name, s) {
			return s
		}
	}
	return name
}

// TestTraceEndToEnd: one source transaction yields spans in all five
// services (one process each, exporting OTLP to a real Jaeger v2), joined
// into one trace or linked where batches merge, with the messaging
// attributes set; checked through Jaeger's query API.
func TestTraceEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dir := t.TempDir()
	t.Cleanup(func() { artifacts(t, dir) })
	j, ok, err := kit.StartJaeger(ctx, dir)
	if !ok {
		if os.Getenv("CI") != "" {
			t.Fatal("no Jaeger v2 binary in ~/.cache/sluice/bin: make test fetches it (make jaeger); CI must run this test, not skip it")
		}
		t.Skip("no Jaeger v2 binary in ~/.cache/sluice/bin: run make jaeger (deploy/fetch-jaeger.sh, about 7 minutes the first time)")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer j.P.Stop(10 * time.Second)

	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.traced (tenant_id text NOT NULL, id bigint NOT NULL, v text, PRIMARY KEY (tenant_id, id))`)
	c, err := kit.NewCluster(dir, kit.Source{DSN: src.dsn, Tables: []string{"public.traced"}}, kit.Settings{OTLPEndpoint: j.OTLP},
		kit.Counts{Readers: 1, Routers: 1, Flushers: 1, Indexers: 1, Publishers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := c.EnsureRunning(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kit.Wait(ctx, c.Server(), src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, c.Tail())
	}
	src.exec(`INSERT INTO public.traced SELECT 'acme', g, 'v' || g FROM generate_series(1, 5) g`)
	if _, err := kit.Wait(ctx, c.Server(), src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, c.Tail())
	}

	var last string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		comp, err := component(ctx, j, "public.traced")
		if err != nil {
			last = err.Error()
			continue
		}
		last = comp.describe()
		missing := comp.missing()
		if len(missing) > 0 {
			continue
		}
		if bad := comp.messagingGaps(); len(bad) > 0 {
			t.Fatalf("spans without messaging attributes: %v\n%s", bad, last)
		}
		t.Logf("one transaction, all five services:\n%s", last)
		traceCLI(t, ctx, j, "acme")
		return
	}
	t.Fatalf("the transaction's spans never covered all five services: %s", last)
}

// traceCLI: `sluice trace --destination D` prints the span tree of D's
// latest flush joined to the reader, router, indexer and publisher spans;
// a destination without a flush exits 1 naming it.
func traceCLI(t *testing.T, ctx context.Context, j *kit.Jaeger, dest string) {
	t.Helper()
	bin, err := kit.SluiceBin()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bin, "trace", "--destination", dest, "--jaeger", j.API).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice trace --destination %s: %v\n%s", dest, err, out)
	}
	text := string(out)
	if !strings.Contains(text, "<- the flush") || !strings.Contains(text, "services: reader, router, flusher, indexer, publisher\n") {
		t.Fatalf("sluice trace --destination %s does not show all five services around the flush:\n%s", dest, text)
	}
	for _, op := range []string{"flusher   flusher.flush", "sluice.routed.", "destination=" + dest, "indexer   ", "publisher publisher.publish"} {
		if !strings.Contains(text, op) {
			t.Errorf("sluice trace output lacks %q:\n%s", op, text)
		}
	}
	t.Logf("sluice trace --destination %s:\n%s", dest, text)
	out, err = exec.CommandContext(ctx, bin, "trace", "--destination", "nobody", "--jaeger", j.API).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "no flush of destination nobody") {
		t.Fatalf("sluice trace --destination nobody: %v\n%s; want exit 1 naming it", err, out)
	}
}

// traceComponent is the set of traces joined to a transaction's reader
// span by parent/child or by span links.
type traceComponent struct {
	traces   map[string]kit.JTrace
	services map[string][]string // service -> operation names
	seed     string
}

func (c *traceComponent) missing() []string {
	var out []string
	for _, s := range fiveServices {
		if len(c.services[s]) == 0 {
			out = append(out, s)
		}
	}
	return out
}

// messagingGaps lists services whose spans never carry messaging.system
// and messaging.destination.name (the services that publish or consume
// messages: all five do).
func (c *traceComponent) messagingGaps() []string {
	has := map[string]bool{}
	for _, tr := range c.traces {
		for _, sp := range tr.Spans {
			sys, ok1 := sp.Tag("messaging.system")
			_, ok2 := sp.Tag("messaging.destination.name")
			if ok1 && ok2 && sys == "nats" {
				has[serviceOf(tr.Processes[sp.ProcessID].ServiceName)] = true
			}
		}
	}
	var out []string
	for _, s := range []string{"reader", "router", "flusher", "indexer"} {
		if !has[s] {
			out = append(out, s)
		}
	}
	return out
}

func (c *traceComponent) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed trace %s; %d traces joined; missing services %v\n", c.seed, len(c.traces), c.missing())
	ids := make([]string, 0, len(c.traces))
	for id := range c.traces {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		tr := c.traces[id]
		var ops []string
		for _, sp := range tr.Spans {
			op := serviceOf(tr.Processes[sp.ProcessID].ServiceName) + ":" + sp.OperationName
			if d, ok := sp.Tag("messaging.destination.name"); ok {
				op += "[" + d + "]"
			}
			for _, r := range sp.References {
				if r.TraceID != id {
					op += "->link:" + r.TraceID[:8]
				}
			}
			ops = append(ops, op)
		}
		sort.Strings(ops)
		fmt.Fprintf(&b, "  trace %s: %s\n", id[:min(8, len(id))], strings.Join(ops, ", "))
	}
	return b.String()
}

// component finds the reader span that published table's change and joins
// every trace linked to it, in either direction.
func component(ctx context.Context, j *kit.Jaeger, table string) (*traceComponent, error) {
	all := map[string]kit.JTrace{}
	names, err := j.Services(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		trs, err := j.Traces(ctx, n, 1000)
		if err != nil {
			return nil, err
		}
		for _, tr := range trs {
			all[tr.TraceID] = tr
		}
	}
	c := &traceComponent{traces: map[string]kit.JTrace{}, services: map[string][]string{}}
	var seeds []string
	for id, tr := range all {
		for _, sp := range tr.Spans {
			if serviceOf(tr.Processes[sp.ProcessID].ServiceName) != "reader" {
				continue
			}
			for _, tag := range sp.Tags {
				if strings.Contains(fmt.Sprint(tag.Value), table) {
					seeds = append(seeds, id)
				}
			}
		}
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("no reader span mentions %s yet (services %v, %d traces)", table, names, len(all))
	}
	sort.Strings(seeds)
	c.seed = seeds[0]
	// Undirected edges between traces joined by a span link.
	edges := map[string][]string{}
	for id, tr := range all {
		for _, sp := range tr.Spans {
			for _, r := range sp.References {
				if r.TraceID != id {
					edges[id] = append(edges[id], r.TraceID)
					edges[r.TraceID] = append(edges[r.TraceID], id)
				}
			}
		}
	}
	queue := []string{c.seed}
	seen := map[string]bool{c.seed: true}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		tr, ok := all[id]
		if !ok {
			if tr, err = j.Trace(ctx, id); err != nil {
				continue
			}
			all[id] = tr
		}
		c.traces[id] = tr
		for _, sp := range tr.Spans {
			s := serviceOf(tr.Processes[sp.ProcessID].ServiceName)
			c.services[s] = append(c.services[s], sp.OperationName)
			for _, r := range sp.References {
				if !seen[r.TraceID] {
					seen[r.TraceID] = true
					queue = append(queue, r.TraceID)
				}
			}
		}
		for _, n := range edges[id] {
			if !seen[n] {
				seen[n] = true
				queue = append(queue, n)
			}
		}
	}
	return c, nil
}
