package catalog_test

import (
	"fmt"
	"sort"
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

// BenchmarkPublish publishes one snapshot per iteration, each admitting one
// new pack, and reports p50 and p99 (the renewal included when due: less
// than half the TTL left).
func BenchmarkPublish(b *testing.B) { benchPublish(b, false) }

// BenchmarkPublishRenewEvery is BenchmarkPublish renewing the lease on
// every publish.
func BenchmarkPublishRenewEvery(b *testing.B) { benchPublish(b, true) }

func benchPublish(b *testing.B, renewEvery bool) {
	conn := chtest.Conn(b)
	c := newCatalog(b, conn)
	catalog.SetAlwaysRenew(c, renewEvery)
	store := openStore(b, "s1")
	var metas []packstore.PackMeta
	for i := range b.N {
		metas = append(metas, catalogtest.Write(b, store, catalogtest.Items, "shop1", fmt.Sprintf("p%d", i), benchRows("shop1", i, 1, uint64(i+1))))
	}
	l, err := c.AcquireLease(b.Context(), "bench", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		index(b, c, store, metas[i])
		b.StartTimer()
		t0 := time.Now()
		res, err := c.Publish(b.Context(), l, time.Minute, 0)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		l = res.Lease
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
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
