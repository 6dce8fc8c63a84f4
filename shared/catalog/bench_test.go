package catalog_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

func benchRows(dest string, start, n int, lsn uint64) []catalogtest.Row {
	rows := make([]catalogtest.Row, n)
	for i := range rows {
		id := int64(start + i)
		rows[i] = catalogtest.Ins(lsn, uint64(i+1), map[string]any{"id": id, "tenant": dest, "name": fmt.Sprintf("item-%d", id), "qty": int32(i),
			"price": "123.45", "ratio": 0.25, "ok": true, "at": int64(1700000000000000 + i), "day": int32(19000), "tags": []any{"a", "b"}, "big": "some text"})
	}
	return rows
}

// BenchmarkIndex indexes 50,000-row batches (5 packs of 10,000 rows).
func BenchmarkIndex(b *testing.B) {
	conn := chtest.Conn(b)
	c := newCatalog(b, conn)
	store := openStore(b, "s1")
	const packRows, perBatch = 10000, 5
	var refs [][]catalog.PackRef
	for i := range b.N {
		var batch []catalog.PackRef
		for j := range perBatch {
			m := catalogtest.Write(b, store, catalogtest.Items, "shop1", fmt.Sprintf("p%d-%d", i, j), benchRows("shop1", (i*perBatch+j)*packRows, packRows, uint64(i+1)))
			ref, err := catalog.ReadRef(b.Context(), store, m.Path())
			if err != nil {
				b.Fatal(err)
			}
			batch = append(batch, ref)
		}
		refs = append(refs, batch)
	}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if _, err := c.Index(b.Context(), store, refs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*packRows*perBatch)/time.Since(start).Seconds(), "rows/s")
}

// cpuTime is the process's CPU time (user and system, every thread: the
// embedded engine's included). On a machine shared with other work it
// measures a statement's cost far more steadily than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPublish publishes one snapshot per iteration on a fresh catalog,
// each admitting one new (really indexed) pack, and reports p50 and p99
// (the lease renewal included: every publish renews) and the process CPU
// time per publish (cpu-p50-ms: steadier than wall time on a shared
// machine; it includes the engine's background merges). With -v it logs
// the per-statement breakdown.
//
//	go test -run '^$' -bench 'Publish$' -benchtime 20x -count 3 ./shared/catalog/
func BenchmarkPublish(b *testing.B) {
	conn := &timedConn{Conn: chtest.Conn(b)}
	c := catalog.New(conn, catalog.Options{Prefix: "sluice"})
	if err := c.EnsureSchema(b.Context()); err != nil {
		b.Fatal(err)
	}
	store := openStore(b, "s1")
	var metas []packstore.PackMeta
	for i := range b.N {
		metas = append(metas, catalogtest.Write(b, store, catalogtest.Items, "shop1", fmt.Sprintf("p%d", i), benchRows("shop1", i, 1, uint64(i+1))))
	}
	l, err := c.AcquireLease(b.Context(), "bench", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	var lat, cpu []time.Duration // cpu: process CPU time during the publish
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		index(b, c, store, metas[i])
		conn.reset()
		b.StartTimer()
		t0, c0 := time.Now(), cpuTime()
		res, err := c.Publish(b.Context(), l, time.Minute, 0)
		if err != nil {
			b.Fatal(err)
		}
		d, dc := time.Since(t0), cpuTime()-c0
		b.StopTimer()
		lat = append(lat, d)
		cpu = append(cpu, dc)
		l = res.Lease
		if res.Snapshot.NewPacks != 1 {
			b.Fatalf("publish %d admitted %d packs, want 1", i, res.Snapshot.NewPacks)
		}
		conn.fold()
		b.StartTimer()
	}
	b.StopTimer()
	p50, p99 := pct(lat)
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
	c50, _ := pct(cpu)
	b.ReportMetric(c50, "cpu-p50-ms")
	b.Logf("statements of the measured publishes:\n%s", conn.totals())
}

// BenchmarkReadPage reads a 1,000-row page from the middle of a 100,000-row
// destination (beside another destination of the same size) at a pinned
// snapshot.
func BenchmarkReadPage(b *testing.B) {
	conn := chtest.Conn(b)
	c := newCatalog(b, conn)
	store := openStore(b, "s1")
	var metas []packstore.PackMeta
	for _, d := range []string{"shop1", "shop2"} {
		for j := range 10 {
			metas = append(metas, catalogtest.Write(b, store, catalogtest.Items, d, fmt.Sprintf("%s-%d", d, j), benchRows(d, j*10000, 10000, 1)))
		}
	}
	// a second version of every tenth row
	metas = append(metas, catalogtest.Write(b, store, catalogtest.Items, "shop1", "upd", benchRows("shop1", 0, 10000, 2)))
	index(b, c, store, metas...)
	var l catalog.Lease
	s := publish(b, c, &l, 0)
	first, err := c.Read(b.Context(), catalog.ReadRequest{Destination: "shop1", Table: catalogtest.Items.Name, Version: s.Version, Limit: 50000})
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		p, err := c.Read(b.Context(), catalog.ReadRequest{Destination: "shop1", Table: catalogtest.Items.Name, Version: s.Version, Cursor: first.Next, Limit: 1000})
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		if len(p.Rows) != 1000 {
			b.Fatalf("%d rows", len(p.Rows))
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// timedConn wraps a real catalog connection and records how long each
// statement took, by kind (which table an INSERT writes, or which read).
// It is instrumentation around the real engine, not a fake.
type timedConn struct {
	catalog.Conn
	mu  sync.Mutex
	d   map[string][]time.Duration
	all map[string][]time.Duration // folded from d (see fold)
}

// fold moves what was recorded since the last reset into the running
// totals: the index statements between publishes are reset away, the
// publish's own are folded.
func (t *timedConn) fold() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.all == nil {
		t.all = map[string][]time.Duration{}
	}
	for k, v := range t.d {
		t.all[k] = append(t.all[k], v...)
	}
	t.d = nil
}

// totals renders the folded statements like summary.
func (t *timedConn) totals() string {
	t.mu.Lock()
	t.d, t.all = t.all, nil
	t.mu.Unlock()
	return t.summary()
}

func (t *timedConn) record(q string, d time.Duration) {
	k := stmtKind(q)
	t.mu.Lock()
	if t.d == nil {
		t.d = map[string][]time.Duration{}
	}
	t.d[k] = append(t.d[k], d)
	t.mu.Unlock()
}

func (t *timedConn) reset() {
	t.mu.Lock()
	t.d = nil
	t.mu.Unlock()
}

func (t *timedConn) Exec(ctx context.Context, q string) error {
	t0 := time.Now()
	err := t.Conn.Exec(ctx, q)
	t.record(q, time.Since(t0))
	return err
}

func (t *timedConn) Query(ctx context.Context, q string) (*catalog.Result, error) {
	t0 := time.Now()
	res, err := t.Conn.Query(ctx, q)
	t.record(q, time.Since(t0))
	return res, err
}

// stmtKind names a catalog statement for the per-statement breakdown.
func stmtKind(q string) string {
	s := strings.TrimSpace(q)
	if rest, ok := strings.CutPrefix(s, "INSERT INTO `sluice_"); ok {
		if i := strings.IndexByte(rest, '`'); i > 0 {
			return "insert " + rest[:i]
		}
	}
	if i := strings.Index(s, "/* "); i >= 0 {
		if j := strings.Index(s[i:], " */"); j > 0 {
			return s[i+3 : i+j]
		}
	}
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

// summary renders p50/p99 per statement kind, sorted by kind.
func (t *timedConn) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var keys []string
	for k := range t.d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		p50, p99 := pct(t.d[k])
		fmt.Fprintf(&b, "  %-40s n=%-5d p50 %6.2f ms  p99 %6.2f ms\n", k, len(t.d[k]), p50, p99)
	}
	return b.String()
}

// pct returns the p50 and p99 of ds in milliseconds (ds is sorted).
func pct(ds []time.Duration) (p50, p99 float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000, float64(s[len(s)*99/100].Microseconds()) / 1000
}

// seedInventory records n inventory rows (packs of one row across 100
// destinations) straight into the inventory, as the indexer's last
// statement would: the publish path reads only the inventory, so the
// bench need not write and read pack files.
func seedInventory(b *testing.B, conn catalog.Conn, from, n int) {
	b.Helper()
	q := fmt.Sprintf(`INSERT INTO sluice_packs (store_id, pack_id, destination, table, path, fingerprint, first_lsn, first_seq, last_lsn, last_seq, rows, tombstones, bytes, indexed_at, trace)
		SELECT 's1', concat('h', toString(number)), concat('d', toString(number %% 100)), 'public.items', '', '', number, 1, number, 1, 1, 0, 100, toUnixTimestamp64Micro(now64(6)), '' FROM numbers(%d, %d)`, from, n)
	if err := conn.Exec(b.Context(), q); err != nil {
		b.Fatal(err)
	}
}

// benchHistory is the number of publishes before the measured ones
// (-publish-history); each admits packsPerPublish new packs.
var (
	benchHistory = flag.Int("publish-history", 1000, "publishes before the measured ones in BenchmarkPublishHistory")
)

// BenchmarkPublishHistory publishes on a realistic catalog: 5,000 packs
// published at version 1, then -publish-history publishes of 10 new packs
// each, then the measured publishes (10 new packs each, the renewal
// included). It reports p50/p99 of the first 50 publishes (start) and of
// the measured ones (after the history), Pending() before each measured
// publish, the floor (SELECT 1) and, with -v, the per-statement breakdown
// and the active parts.
func BenchmarkPublishHistory(b *testing.B) {
	tc := &timedConn{Conn: chtest.Conn(b)}
	c := catalog.New(tc, catalog.Options{Prefix: "sluice"})
	if err := c.EnsureSchema(b.Context()); err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	const initial, perPublish = 5000, 10
	seedInventory(b, tc, 0, initial)
	next := initial
	l, err := c.AcquireLease(ctx, "bench", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	var cpu []time.Duration // process CPU time of each publish
	one := func() time.Duration {
		t0, c0 := time.Now(), cpuTime()
		res, err := c.Publish(ctx, l, time.Minute, 0)
		if err != nil {
			b.Fatal(err)
		}
		l = res.Lease
		d := time.Since(t0)
		cpu = append(cpu, cpuTime()-c0)
		return d
	}
	one() // version 1: the initial inventory
	var start []time.Duration
	for i := range *benchHistory {
		seedInventory(b, tc, next, perPublish)
		next += perPublish
		d := one()
		if i < 50 {
			start = append(start, d)
		}
	}
	var floor []time.Duration
	for range 50 {
		t0 := time.Now()
		if _, err := tc.Conn.Query(ctx, "SELECT 1"); err != nil {
			b.Fatal(err)
		}
		floor = append(floor, time.Since(t0))
	}
	startCPU, _ := pct(cpu[1:min(len(cpu), 51)])
	cpu = cpu[:0]
	tc.reset()
	var lat, pend []time.Duration
	for b.Loop() {
		b.StopTimer()
		seedInventory(b, tc, next, perPublish)
		next += perPublish
		t0 := time.Now()
		n, err := c.Pending(ctx)
		if err != nil || n != perPublish {
			b.Fatalf("pending %d, %v", n, err)
		}
		pend = append(pend, time.Since(t0))
		b.StartTimer()
		lat = append(lat, one())
	}
	f50, _ := pct(floor)
	s50, s99 := pct(start)
	p50, p99 := pct(lat)
	q50, _ := pct(pend)
	b.ReportMetric(f50, "floor-ms")
	b.ReportMetric(s50, "start-p50-ms")
	b.ReportMetric(s99, "start-p99-ms")
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
	b.ReportMetric(p50/f50, "p50-floors")
	b.ReportMetric(q50, "pending-p50-ms")
	c50, _ := pct(cpu)
	b.ReportMetric(startCPU, "start-cpu-p50-ms")
	b.ReportMetric(c50, "cpu-p50-ms")
	parts, err := tc.Conn.Query(ctx, "SELECT table, count() FROM system.parts WHERE database = currentDatabase() AND active GROUP BY table ORDER BY table")
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("after %d publishes: active parts %v\nstatements of the measured publishes:\n%s", *benchHistory, parts.Rows, tc.summary())
}
