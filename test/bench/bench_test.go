package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Shutdown()
	kit.Cleanup()
	os.Exit(code)
}

type result struct {
	tenants       int
	rows          int
	load, visible time.Duration
	rowsPerSec    float64
	offered       int
	samples       int
	p50, p99, max time.Duration
	// Per case: the flusher's peak RSS (KiB), pack or segment files written
	// per second of the throughput phase, ROUTED messages per change batch.
	rssKiB       int64
	filesPerSec  float64
	filesCounted bool
	msgsPerBatch float64
	// CPU of the pipeline's processes: milliseconds per 1,000 rows of the
	// throughput phase, and cores used on average over the latency phase.
	cpuPerKRow, latencyCores float64
	err                      string
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envDur(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func benchKey() string {
	if k := os.Getenv("SLUICE_BENCH_KEY"); k != "" {
		return k
	}
	return "tenant_id, id"
}

func tenantCounts() []int {
	v := os.Getenv("SLUICE_BENCH_TENANTS")
	if v == "" {
		return []int{10, 1000, 10000, 100000}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// BenchmarkEndToEnd prints one line per tenant count: rows/s from commit to
// published snapshot, and commit-to-visible p50/p99 at 5,000 rows/s with a
// 1 s flush interval.
func BenchmarkEndToEnd(b *testing.B) {
	var results []result
	for _, tenants := range tenantCounts() {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			r := run(b, tenants)
			results = append(results, r)
			if r.err != "" {
				b.Error(r.err)
				return
			}
			b.ReportMetric(r.rowsPerSec, "rows/s")
			b.ReportMetric(float64(r.p50.Milliseconds()), "p50-ms")
			b.ReportMetric(float64(r.p99.Milliseconds()), "p99-ms")
			b.ReportMetric(float64(r.rssKiB)/1024, "flusher-rss-MiB")
			b.ReportMetric(r.filesPerSec, "files/s")
			b.ReportMetric(r.msgsPerBatch, "msgs/batch")
			b.ReportMetric(r.cpuPerKRow, "cpu-ms/krow")
			b.ReportMetric(r.latencyCores, "latency-cores")
		})
	}
	var sb strings.Builder
	mode := "one process"
	if os.Getenv("SLUICE_BENCH_MODE") == "multi" {
		mode = "processes: 1 reader, 2 routers, 2 flushers, 2 indexers, 1 publisher"
	}
	fmt.Fprintf(&sb, "\nsluice end to end (%s, flush_interval 1s, publisher.interval 200ms, %d partitions)\n", mode, 16)
	fmt.Fprintf(&sb, "%8s  %9s  %8s  %11s  %10s  %9s  %8s  %8s  %8s  %9s  %8s  %10s  %11s  %7s  %s\n", "tenants", "rows", "load", "rows/s", "drain", "offered", "p50", "p99", "max",
		"rss-MiB", "files/s", "msgs/batch", "cpu-ms/krow", "cores", "")
	counted := false
	for _, r := range results {
		fmt.Fprintf(&sb, "%8d  %9d  %8s  %11.0f  %10s  %7d/s  %8s  %8s  %8s  %9.0f  %8.1f  %10.2f  %11.1f  %7.2f  %s\n", r.tenants, r.rows, r.load.Round(10*time.Millisecond), r.rowsPerSec,
			r.visible.Round(10*time.Millisecond), r.offered, r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.max.Round(time.Millisecond),
			float64(r.rssKiB)/1024, r.filesPerSec, r.msgsPerBatch, r.cpuPerKRow, r.latencyCores, r.err)
		counted = counted || r.filesCounted
	}
	sb.WriteString("load: how long the source took to commit the rows (its own cost: with the key (tenant_id, id) it grows with the tenant count, SLUICE_BENCH_KEY)")
	sb.WriteString("; rss: the flusher process's VmHWM over the case (the largest flusher's with processes); files/s: files written per second of the throughput phase")
	if counted {
		sb.WriteString(" (counted in the store: no sluice_flusher_files_written_total)")
	}
	sb.WriteString("; msgs/batch: ROUTED messages per routed change batch")
	sb.WriteString("; cpu-ms/krow: the pipeline processes' CPU (chDB included) per 1,000 rows of the throughput phase; cores: their CPU per second of the latency phase\n")
	if os.Getenv("SLUICE_BENCH_MODE") == "multi" {
		// A flusher process's Go memory limit is its budget plus the
		// fixed overhead (services/flusher/internal/delivery FixedOverhead).
		bound := float64(config.Default().Delivery.MemoryBudget+flusherFixedOverhead) / (1 << 20)
		for _, r := range results {
			verdict := "under"
			if rss := float64(r.rssKiB) / 1024; rss > bound {
				verdict = "OVER"
			}
			fmt.Fprintf(&sb, "tenants %d: the largest flusher process peaked at %.0f MiB, %s delivery.memory_budget + fixed overhead = %.0f MiB\n",
				r.tenants, float64(r.rssKiB)/1024, verdict, bound)
		}
	}
	fmt.Print(sb.String())
}

// flusherFixedOverhead is the flusher's memory beyond its budget
// (services/flusher/internal/delivery FixedOverhead, an internal package).
const flusherFixedOverhead = 96 << 20

func run(b *testing.B, tenants int) (res result) {
	res = result{tenants: tenants, rows: envInt("SLUICE_BENCH_ROWS", 300000), offered: 5000}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dsn := pgtest.NewDB(b)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE public.bench_events (tenant_id text NOT NULL, id bigint NOT NULL,
		v bigint NOT NULL, note text, PRIMARY KEY (`+benchKey()+`))`); err != nil {
		b.Fatal(err)
	}
	settings := kit.Settings{FlushInterval: "1s", PublisherInterval: "200ms", Partitions: 16, LogLevel: "warn"}
	// SLUICE_BENCH_ENV: space-separated KEY=VALUE pairs for the sluice
	// processes (e.g. SLUICE_TELEMETRY_LOG_LEVEL=debug).
	settings.Env = append(settings.Env, strings.Fields(os.Getenv("SLUICE_BENCH_ENV"))...)
	if os.Getenv("SLUICE_BENCH_PPROF") != "" {
		// Profile a run: go tool pprof <server>/debug/pprof/profile
		settings.Env = append(settings.Env, "SLUICE_HTTP_PPROF=true")
	}
	var p kit.Pipeline
	dir := b.TempDir()

	src := kit.Source{DSN: dsn, Tables: []string{"public.bench_events"}, Slot: "sluice_bench"}
	if os.Getenv("SLUICE_BENCH_MODE") == "multi" {
		p, err = kit.NewCluster(dir, src, settings, kit.Counts{Readers: 1, Routers: 2, Flushers: 2, Indexers: 2, Publishers: 1})
	} else {
		p, err = kit.NewDev(dir, src, settings)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer p.Stop()
	defer func() { res.rssKiB = flusherHWM(p) }() // before Stop: the process's peak over the case
	if err := p.EnsureRunning(ctx); err != nil {
		b.Fatal(err)
	}
	// Wait for the pipeline to be live (first snapshot at the current LSN).
	var lsn string
	_ = pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	if _, err := kit.Wait(ctx, p.Server(), lsn, 3*time.Minute); err != nil {
		res.err = fmt.Sprintf("pipeline never published: %v", err)
		return res
	}
	b.ResetTimer()
	b.Logf("tenants %d: pipeline live at %s", tenants, p.Server())

	// Throughput.
	const txRows = 10000
	before := sample(ctx, p, dir)
	start := time.Now()
	var next int64
	var mu sync.Mutex
	eg, ectx := errgroup.WithContext(ctx)
	for w := 0; w < 2; w++ {
		eg.Go(func() error {
			for {
				mu.Lock()
				lo := next
				next += txRows
				mu.Unlock()
				if lo >= int64(res.rows) {
					return nil
				}
				hi := min(lo+txRows, int64(res.rows)) - 1
				if _, err := pool.Exec(ectx, `INSERT INTO public.bench_events SELECT 't' || (g % $3), g, g * 2, 'n' || (g % 97)
					FROM generate_series($1::bigint, $2::bigint) g`, lo, hi, tenants); err != nil {
					return err
				}
			}
		})
	}
	if err := eg.Wait(); err != nil {
		b.Fatal(err)
	}
	res.load = time.Since(start)
	_ = pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	budget := envDur("SLUICE_BENCH_BUDGET", 3*time.Minute)
	if _, err := kit.Wait(ctx, p.Server(), lsn, budget); err != nil {
		res.visible = time.Since(start)
		res.measure(before, sample(ctx, p, dir))
		res.err = fmt.Sprintf("not caught up with %d rows after %s (< %.0f rows/s)", res.rows, res.visible.Round(time.Second), float64(res.rows)/res.visible.Seconds())
		return res
	}
	res.visible = time.Since(start)
	res.rowsPerSec = float64(res.rows) / res.visible.Seconds()
	res.measure(before, sample(ctx, p, dir))
	b.Logf("tenants %d: %d rows loaded in %s, visible after %s: %.0f rows/s", tenants, res.rows, res.load, res.visible, res.rowsPerSec)

	// Latency at a fixed offered rate.
	cpu0, t0 := sample(ctx, p, dir).cpu, time.Now()
	lat, err := latency(ctx, pool, p.Server(), tenants, res.rows, envDur("SLUICE_BENCH_LATENCY", 30*time.Second))
	res.latencyCores = (sample(ctx, p, dir).cpu - cpu0).Seconds() / time.Since(t0).Seconds()
	if err != nil {
		res.err = err.Error()
		return res
	}
	res.samples = len(lat)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.p50, res.p99, res.max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	b.Logf("tenants %d: %d commits at %d rows/s: p50 %s p99 %s max %s", tenants, len(lat), res.offered, res.p50, res.p99, res.max)
	return res
}

// measure sets the per-case rates of the throughput phase (res.visible
// long) from the counters at its start and end.
func (res *result) measure(before, after counters) {
	res.filesPerSec = (after.filesWritten - before.filesWritten) / res.visible.Seconds()
	res.filesCounted = after.filesCounted
	res.cpuPerKRow = float64((after.cpu - before.cpu).Milliseconds()) * 1000 / float64(res.rows)
	if n := after.routedBatches - before.routedBatches; n > 0 {
		res.msgsPerBatch = (after.published - before.published) / n
	}
}

type commit struct {
	at  time.Time
	lsn proto.LSN
}

// latency offers 5,000 rows/s (500 rows every 100 ms) for d and returns
// each commit's commit-to-visible time.
func latency(ctx context.Context, pool *pgxpool.Pool, server string, tenants, base int, d time.Duration) ([]time.Duration, error) {
	var commits []commit
	type seen struct {
		at  time.Time
		lsn proto.LSN
	}
	var (
		mu      sync.Mutex
		through []seen
	)
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		hc := &http.Client{Timeout: 5 * time.Second}
		var last proto.LSN
		for pollCtx.Err() == nil {
			if l, err := latestThrough(pollCtx, hc, server); err == nil && l > last {
				last = l
				mu.Lock()
				through = append(through, seen{time.Now(), l})
				mu.Unlock()
			}
			select {
			case <-pollCtx.Done():
			case <-time.After(pollEvery):
			}
		}
	}()
	id := int64(base)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		<-tick.C
		var lsn string
		err := pool.QueryRow(ctx, `WITH ins AS (INSERT INTO public.bench_events SELECT 't' || (g % $3), g, g * 2, 'l'
			FROM generate_series($1::bigint, $2::bigint) g RETURNING 1) SELECT count(*)::text FROM ins`, id, id+499, tenants).Scan(&lsn)
		if err != nil {
			return nil, err
		}
		at := time.Now()
		if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			return nil, err
		}
		l, err := proto.ParseLSN(lsn)
		if err != nil {
			return nil, err
		}
		commits = append(commits, commit{at, l})
		id += 500
	}
	// Wait until the last commit is visible.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mu.Lock()
		done := len(through) > 0 && through[len(through)-1].lsn >= commits[len(commits)-1].lsn
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("latency: the last commit never became visible")
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopPoll()
	<-pollDone
	var out []time.Duration
	j := 0
	for _, c := range commits {
		for j < len(through) && through[j].lsn < c.lsn {
			j++
		}
		out = append(out, through[j].at.Sub(c.at))
	}
	return out, nil
}

// pollEvery is how often the latency phase reads the latest snapshot. Each
// read is a catalog statement, and the catalog engine runs one statement
// at a time: a tighter poll measures the poll (at 25 ms on the loaded
// 2-core machine it kept chDB busy half the time, delaying the publishes
// it timed). It adds at most pollEvery to a commit's figure.
const pollEvery = 100 * time.Millisecond

func latestThrough(ctx context.Context, hc *http.Client, server string) (proto.LSN, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/api/v1/snapshots/latest", nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	var s struct {
		ThroughLSN string `json:"through_lsn"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return 0, err
	}
	return proto.ParseLSN(s.ThroughLSN)
}
