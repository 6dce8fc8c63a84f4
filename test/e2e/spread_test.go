package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/test/kit"
)

// The work each replica did, from its own /metrics (every process serves
// its own, so the series of a scrape say which replica did what).
// A flusher's share is the partitions it owns (a gauge, at the end): the
// unit the partition leases balance. Its rows follow the traffic of the
// destinations those partitions hold, and the workload skews traffic
// towards a few tenants while a destination has one owner at a time, so
// rows are printed, not held to 2x.
var shareMetrics = []struct {
	service, what, metric string
	labels                []string
	gauge                 bool
}{
	{"router", "CHANGES messages routed", "sluice_consume_messages_total", []string{`stage="router"`}, false},
	{"flusher", "partitions owned", "sluice_flusher_owned_partitions", nil, true},
	{"indexer", "packs indexed", "sluice_indexer_packs_total", nil, false},
}

// scrapeAll reads every running service process's metrics.
func scrapeAll(t *testing.T, ctx context.Context, c *kit.Cluster) map[string]kit.Samples {
	t.Helper()
	out := map[string]kit.Samples{}
	for _, p := range c.Procs {
		if !p.Running() {
			continue
		}
		s, err := kit.Scrape(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		out[p.Name] = s
	}
	return out
}

// checkShares asserts that every replica of each sharing service that ran
// through [before, after] did a fair share of its service's work: within 2x
// of an even split. It prints the figures, also each flusher's partitions,
// rows and flushes.
func checkShares(t *testing.T, phase string, before, after map[string]kit.Samples) {
	t.Helper()
	for _, m := range shareMetrics {
		var names []string
		for name := range after {
			if _, ok := before[name]; ok && strings.HasPrefix(name, m.service+"-") {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		var total float64
		work := map[string]float64{}
		for _, n := range names {
			work[n] = after[n].Sum(m.metric, m.labels...)
			if !m.gauge {
				work[n] -= before[n].Sum(m.metric, m.labels...)
			}
			total += work[n]
		}
		var parts []string
		for _, n := range names {
			extra := ""
			if m.service == "flusher" {
				extra = fmt.Sprintf(" (%v destinations buffered now, %v rows in %v flushes)", after[n].Sum("sluice_flusher_destinations"),
					after[n].Sum("sluice_flusher_flushed_rows_total")-before[n].Sum("sluice_flusher_flushed_rows_total"),
					after[n].Sum("sluice_flusher_flushes_total")-before[n].Sum("sluice_flusher_flushes_total"))
			}
			parts = append(parts, fmt.Sprintf("%s %v%s", n, work[n], extra))
		}
		t.Logf("SHARE %s, %s: %s (total %v)", phase, m.what, strings.Join(parts, ", "), total)
		if len(names) == 0 || total == 0 {
			t.Errorf("%s: no %s did any work (%s)", phase, m.service, m.what)
			continue
		}
		even := total / float64(len(names))
		for _, n := range names {
			if work[n] < even/2 || work[n] > even*2 {
				t.Errorf("%s: %s did %v of %v %s: not within 2x of an even share (%v)", phase, n, work[n], total, m.what, even)
			}
		}
	}
}

// waitFor retries cond every 200ms until it holds or within passes; it
// returns how long it took.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start)
}

// readerState is the reader's phase in p's status (standby, streaming, ...).
func readerState(ctx context.Context, p *kit.Proc) string {
	st, err := kit.Status(ctx, p)
	if err != nil {
		return ""
	}
	svc, _ := st["services"].(map[string]any)
	r, _ := svc["reader"].(map[string]any)
	s, _ := r["state"].(string)
	return s
}

// publisherHolds reports whether p's status says it holds the lease.
func publisherHolds(ctx context.Context, p *kit.Proc) bool {
	st, err := kit.Status(ctx, p)
	if err != nil {
		return false
	}
	svc, _ := st["services"].(map[string]any)
	pub, _ := svc["publisher"].(map[string]any)
	held, _ := pub["lease_held"].(bool)
	return held
}

func gauge(ctx context.Context, p *kit.Proc, metric string, labels ...string) float64 {
	s, err := kit.Scrape(ctx, p)
	if err != nil {
		return -1
	}
	return s.Sum(metric, labels...)
}

// leases are the lease TTLs a test runs its services with.
type leases struct{ reader, publisher, delivery time.Duration }

// defaultLeases are the config's defaults.
var defaultLeases = leases{reader: 10 * time.Second, publisher: 10 * time.Second, delivery: 15 * time.Second}

// env sets them on every service process.
func (l leases) env() []string {
	return []string{
		"SLUICE_READER_LEASE_TTL=" + l.reader.String(),
		"SLUICE_PUBLISHER_LEASE_TTL=" + l.publisher.String(),
		"SLUICE_DELIVERY_LEASE_TTL=" + l.delivery.String(),
	}
}

// takeover kills one router, one flusher, one indexer, the active reader
// and the publisher holding the lease while traffic flows, and checks that
// the standby reader and publisher take over within their lease (TTL plus
// one acquire poll, TTL/3, plus 10 s of slack for a loaded machine), that
// the surviving flushers own every partition within delivery.lease_ttl
// plus its renewal and the same slack, and that the survivors do all the
// work after the kill. A killed router's or indexer's unacked messages
// come back after their consumer's AckWait (15 s each): the next wait is
// bounded by that plus a loaded machine's slack.
func takeover(t *testing.T, ctx context.Context, c *kit.Cluster, pool *pgxpool.Pool, partitions int, l leases, traffic func(time.Duration) <-chan error) {
	t.Helper()
	var reader, publisher *kit.Proc
	for _, p := range c.Procs {
		switch {
		case strings.HasPrefix(p.Name, "reader-") && readerState(ctx, p) == "streaming":
			reader = p
		case strings.HasPrefix(p.Name, "publisher-") && publisherHolds(ctx, p):
			publisher = p
		}
	}
	if reader == nil || publisher == nil {
		t.Fatalf("no streaming reader (%v) or lease-holding publisher (%v)", reader, publisher)
	}
	victims := []*kit.Proc{reader, publisher, proc(c, "router-0"), proc(c, "flusher-0"), proc(c, "indexer-0")}
	done := traffic(10 * time.Second)
	time.Sleep(2 * time.Second) // traffic flowing when the kills land, not a synchronization
	before := scrapeAll(t, ctx, c)
	for _, v := range victims {
		v.Kill()
	}
	t.Logf("kill -9 of %s, %s, router-0, flusher-0, indexer-0", reader.Name, publisher.Name)
	standby := other(c, "reader-", reader)
	took := waitFor(t, "the standby reader streams", l.reader*4/3+10*time.Second, func() bool { return readerState(ctx, standby) == "streaming" })
	t.Logf("TAKEOVER reader: %s streams %s after the kill (reader.lease_ttl %s)", standby.Name, took.Round(10*time.Millisecond), l.reader)
	pub := other(c, "publisher-", publisher)
	published := gauge(ctx, pub, "sluice_publisher_publishes_total")
	took = waitFor(t, "the standby publisher publishes", l.publisher*4/3+10*time.Second, func() bool {
		return gauge(ctx, pub, "sluice_publisher_publishes_total") > published
	})
	t.Logf("TAKEOVER publisher: %s publishes %s after the kill (publisher.lease_ttl %s)", pub.Name, took.Round(10*time.Millisecond), l.publisher)
	took = waitFor(t, "the surviving flushers own every partition", l.delivery*4/3+10*time.Second, func() bool {
		var owned float64
		for _, p := range c.Procs {
			if strings.HasPrefix(p.Name, "flusher-") && p.Running() {
				owned += gauge(ctx, p, "sluice_flusher_owned_partitions")
			}
		}
		return owned == float64(partitions)
	})
	t.Logf("TAKEOVER flusher: flusher-1 and flusher-2 own all %d partitions %s after the kill (delivery.lease_ttl %s)", partitions, took.Round(10*time.Millisecond), l.delivery)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	settleStart := time.Now()
	waitThrough(t, ctx, c, pool, 15*time.Second+45*time.Second)
	t.Logf("TAKEOVER: the traffic after the kill is published %s after it ended (bound: the consumers' AckWait 15s + 45s)", time.Since(settleStart).Round(10*time.Millisecond))
	checkShares(t, "after the kills (survivors)", before, scrapeAll(t, ctx, c))
	if err := c.EnsureRunning(ctx); err != nil {
		t.Fatalf("restarting the killed: %v", err)
	}
}

// waitThrough waits until a snapshot holds the source's current LSN.
func waitThrough(t *testing.T, ctx context.Context, c *kit.Cluster, pool *pgxpool.Pool, timeout time.Duration) {
	t.Helper()
	lsn, err := currentLSN(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kit.Wait(ctx, c.Server(), lsn, timeout); err != nil {
		t.Fatalf("waiting for %s: %v\n%s", lsn, err, c.Tail())
	}
}

func proc(c *kit.Cluster, name string) *kit.Proc {
	for _, p := range c.Procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// other is the first running process of the service (prefix) that is not p.
func other(c *kit.Cluster, prefix string, p *kit.Proc) *kit.Proc {
	for _, q := range c.Procs {
		if q != p && strings.HasPrefix(q.Name, prefix) && q.Running() {
			return q
		}
	}
	return nil
}

// costs prints each service's CPU per unit of work over [before, after]
// from the processes' own process_cpu_seconds_total: the per-unit costs
// docs/scaling.md scales up.
func costs(t *testing.T, phase string, before, after map[string]kit.Samples) {
	t.Helper()
	units := []struct{ service, unit, metric string }{
		{"reader", "row", "sluice_reader_rows_total"},
		{"router", "row", "sluice_router_rows_total"},
		{"flusher", "row", "sluice_flusher_flushed_rows_total"},
		{"indexer", "row", "sluice_indexer_rows_total"},
		{"publisher", "publish", "sluice_publisher_publishes_total"},
	}
	for _, u := range units {
		var cpu, work float64
		var n int
		for name, a := range after {
			b, ok := before[name]
			if !ok || !strings.HasPrefix(name, u.service+"-") {
				continue
			}
			n++
			cpu += a.Sum("process_cpu_seconds_total") - b.Sum("process_cpu_seconds_total")
			work += a.Sum(u.metric) - b.Sum(u.metric)
		}
		per := "n/a"
		if work > 0 {
			per = fmt.Sprintf("%.0f µs", cpu/work*1e6)
		}
		t.Logf("COST %s, %s: %d replicas, %.2f CPU s, %v %ss, %s CPU per %s", phase, u.service, n, cpu, work, u.unit, per, u.unit)
	}
}
