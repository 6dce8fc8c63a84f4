package catalog_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// histTable is the history benchmark's table: a key, the tenant, and a
// TOAST-able payload.
var histTable = catalogtest.Table{
	Name: "public.hist",
	Columns: []catalogtest.Col{
		{Name: "id", Kind: proto.KindInt64, PgType: "bigint"},
		{Name: "tenant", Kind: proto.KindText, PgType: "text"},
		{Name: "qty", Kind: proto.KindInt64, PgType: "bigint"},
		{Name: "note", Kind: proto.KindText, PgType: "text"},
	},
	PK: []string{"id"}, Routing: "tenant",
}

// histTTL is the benchmark's lease ttl: the measurements between
// publishes take minutes on a loaded machine.
const histTTL = time.Hour

const (
	histTenants = 20
	histRows    = 1000 // live rows, histRows/histTenants per tenant
)

func histEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// writeFlush writes one flush: a segment of every tenant holding one
// version of each of its rows at positions base+i.
func writeFlush(b *testing.B, store packstore.Store, n int, base uint64) packstore.PackMeta {
	b.Helper()
	var parts []packstore.SegmentPart
	var fp string
	for t := 0; t < histTenants; t++ {
		dest := fmt.Sprintf("tenant%02d", t)
		var rows []catalogtest.Row
		for i := 0; i < histRows/histTenants; i++ {
			id := int64(t*histRows/histTenants + i)
			vals := map[string]any{"id": id, "tenant": dest, "qty": int64(n)}
			if n%10 == 0 {
				vals["note"] = fmt.Sprintf("note %d of row %d", n, id)
				rows = append(rows, catalogtest.Upd(base+uint64(id), 1, vals))
			} else {
				rows = append(rows, catalogtest.Upd(base+uint64(id), 1, vals, "note"))
			}
		}
		rec := histTable.Record(rows)
		defer rec.Release()
		fp = arrowcodec.Fingerprint(rec.Schema())
		parts = append(parts, packstore.SegmentPart{Destination: dest, Recs: []arrow.RecordBatch{rec}})
	}
	id := proto.SegmentID(segT0.Add(time.Duration(n)*time.Second), "bench", uint64(n))
	data, _, err := packstore.EncodeSegment(parts, packstore.SegmentMeta{PackID: id, StoreID: store.ID(), Table: histTable.Name, Schema: fp})
	if err != nil {
		b.Fatal(err)
	}
	meta, _, err := packstore.ReadPackMeta(data)
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Put(b.Context(), meta.Path(), data); err != nil {
		b.Fatal(err)
	}
	return meta
}

// storeSize is the bytes and files under a store's root.
func storeSize(b *testing.B, s *packstore.DirStore) (int64, int) {
	var bytes int64
	files := 0
	_ = filepath.WalkDir(s.Root(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				bytes += info.Size()
				files++
			}
		}
		return nil
	})
	return bytes, files
}

// histCosts is the median time of the three measured operations.
type histCosts struct{ page, status, snapshots time.Duration }

func measure(b *testing.B, c *catalog.Catalog) histCosts {
	b.Helper()
	ctx := b.Context()
	med := func(f func()) time.Duration {
		var ds []time.Duration
		for range 15 {
			start := time.Now()
			f()
			ds = append(ds, time.Since(start))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	var out histCosts
	// A 1,000-row page: the whole table over one tenant's 50 keys is too
	// small, so the page reads tenant00 with the default page size and
	// every tenant in turn.
	t := 0
	out.page = med(func() {
		dest := fmt.Sprintf("tenant%02d", t%histTenants)
		t++
		p, err := c.Read(ctx, catalog.ReadRequest{Destination: dest, Table: histTable.Name, Limit: 1000})
		if err != nil || len(p.Rows) != histRows/histTenants {
			b.Fatalf("read %s: %d rows, %v", dest, len(p.Rows), err)
		}
	})
	out.status = med(func() {
		if _, err := c.Latest(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Pending(ctx); err != nil {
			b.Fatal(err)
		}
	})
	out.snapshots = med(func() {
		if _, _, err := c.RetainedSnapshots(ctx, catalog.SnapshotPage{Limit: 1000}); err != nil {
			b.Fatal(err)
		}
	})
	return out
}

// BenchmarkHistory is the lifecycle's done-when benchmark: histRows live
// rows over histTenants tenants, every row updated once per flush (one
// segment per flush) for SLUICE_BENCH_HISTORY_FLUSHES flushes (default
// 1,000: 1,000 versions per key), with SLUICE_BENCH_HISTORY_PUBLISHES
// publishes per flush (default 10: 10,000 snapshots), written straight
// through the catalog API; then compaction and GC (retention: the newest
// 100 snapshots). It prints the page read, status and snapshots costs
// before and after against a fresh catalog of the same live rows, as
// ratios, and the store's bytes and files against the live data's. Nothing
// is asserted on time. make bench runs it (SLUICE_BENCH_HISTORY=1,
// -benchtime 1x).
func BenchmarkHistory(b *testing.B) {
	if os.Getenv("SLUICE_BENCH_HISTORY") == "" {
		b.Skip("minutes long: SLUICE_BENCH_HISTORY=1 (make bench) runs it, with -benchtime 1x")
	}
	if b.N > 1 {
		b.Skip("one run is the measurement: -benchtime 1x")
	}
	if os.Getenv("SLUICE_BENCH_HISTORY_LIGHTWEIGHT") != "" {
		defer catalog.SetGCLightweight(true)() // GC deletes rows by lightweight DELETE FROM
	}
	flushes := histEnv("SLUICE_BENCH_HISTORY_FLUSHES", 1000)
	perFlush := histEnv("SLUICE_BENCH_HISTORY_PUBLISHES", 10)
	ctx := b.Context()
	conn := chtest.Conn(b)
	open := func(prefix string) (*catalog.Catalog, *packstore.DirStore, catalog.Lease) {
		c := catalog.New(conn, catalog.Options{Prefix: prefix, GCGrace: time.Millisecond})
		if err := c.EnsureSchema(ctx); err != nil {
			b.Fatal(err)
		}
		store, err := packstore.OpenDir(b.TempDir(), "s1")
		if err != nil {
			b.Fatal(err)
		}
		l, err := c.AcquireLease(ctx, "bench", histTTL)
		if err != nil {
			b.Fatal(err)
		}
		return c, store, l
	}
	index := func(c *catalog.Catalog, store packstore.Store, m packstore.PackMeta) {
		ref, err := catalog.ReadRef(ctx, store, m.Path())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Index(ctx, store, []catalog.PackRef{ref}); err != nil {
			b.Fatal(err)
		}
	}
	pub := func(c *catalog.Catalog, l *catalog.Lease) {
		res, err := c.Publish(ctx, *l, histTTL, 0)
		if err != nil {
			b.Fatal(err)
		}
		*l = res.Lease
	}

	fresh, fstore, fl := open("fresh")
	index(fresh, fstore, writeFlush(b, fstore, 0, 1000))
	pub(fresh, &fl)
	liveBytes, liveFiles := storeSize(b, fstore)

	hist, hstore, hl := open("hist")
	start := time.Now()
	for n := 0; n < flushes; n++ {
		index(hist, hstore, writeFlush(b, hstore, n, 1000+uint64(n)*histRows))
		for range perFlush {
			pub(hist, &hl)
		}
	}
	built := time.Since(start)
	snaps, err := hist.Snapshots(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("history: %d flushes, %d versions per key, %d snapshots, built in %s", flushes, flushes, len(snaps), built.Round(time.Second))

	base := measure(b, fresh)
	before := measure(b, hist)
	beforeBytes, beforeFiles := storeSize(b, hstore)

	start = time.Now()
	passes := 0
	for {
		st, l, err := hist.Compact(ctx, hl, histTTL, hstore, catalog.CompactPolicy{MinPacks: 16, SmallBytes: 8 << 20, MaxBytes: 1 << 30}, "compact")
		if err != nil {
			b.Fatal(err)
		}
		hl = l
		if st.Members == 0 {
			break
		}
		passes++
	}
	compacted := time.Since(start)
	// The pipeline goes on publishing: the retention window (the newest
	// 100 snapshots) passes the compaction's removals.
	for range 101 {
		pub(hist, &hl)
	}
	if _, err := hist.AdvanceRetention(ctx, hl, catalog.RetentionPolicy{Retention: time.Microsecond, RetainMin: 100}); err != nil {
		b.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	start = time.Now()
	var gs catalog.GCStats
	for {
		st, err := hist.CollectGarbage(ctx, hstore, catalog.GCOptions{})
		if err != nil {
			b.Fatal(err)
		}
		gs.Members, gs.Files, gs.Watermarks = gs.Members+st.Members, gs.Files+st.Files, gs.Watermarks+st.Watermarks
		if st.Members == 0 {
			break
		}
	}
	collected := time.Since(start)
	after := measure(b, hist)
	afterBytes, afterFiles := storeSize(b, hstore)

	ratio := func(a, f time.Duration) string { return fmt.Sprintf("%.2fx", float64(a)/float64(f)) }
	b.Logf("compaction: %d passes in %s; GC: %+v in %s", passes, compacted.Round(time.Millisecond), gs, collected.Round(time.Millisecond))
	b.Logf("fresh catalog: page %s, status %s, snapshots %s", base.page, base.status, base.snapshots)
	b.Logf("history before: page %s (%s), status %s (%s), snapshots %s (%s)", before.page, ratio(before.page, base.page),
		before.status, ratio(before.status, base.status), before.snapshots, ratio(before.snapshots, base.snapshots))
	b.Logf("history after:  page %s (%s), status %s (%s), snapshots %s (%s)", after.page, ratio(after.page, base.page),
		after.status, ratio(after.status, base.status), after.snapshots, ratio(after.snapshots, base.snapshots))
	b.Logf("store: live %d bytes in %d files; before %d bytes (%.1fx) in %d files; after %d bytes (%.1fx) in %d files",
		liveBytes, liveFiles, beforeBytes, float64(beforeBytes)/float64(liveBytes), beforeFiles, afterBytes, float64(afterBytes)/float64(liveBytes), afterFiles)
	b.ReportMetric(float64(after.page)/float64(base.page), "page-ratio")
	b.ReportMetric(float64(after.status)/float64(base.status), "status-ratio")
	b.ReportMetric(float64(after.snapshots)/float64(base.snapshots), "snapshots-ratio")
}
