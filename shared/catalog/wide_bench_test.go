package catalog_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

var (
	wideHistory = flag.Int("wide-history", 30, "publishes before the measured ones in BenchmarkWideHistory")
	wideDests   = flag.Int("wide-destinations", 10000, "destinations of each segment in BenchmarkWideHistory")
)

// seedSegment records one segment holding every one of dests destinations
// (one inventory row per destination, as the indexer records a segment)
// straight into the inventory.
func seedSegment(b *testing.B, conn catalog.Conn, seg, dests int) {
	b.Helper()
	q := fmt.Sprintf(`INSERT INTO sluice_packs (store_id, pack_id, destination, table, path, fingerprint, first_lsn, first_seq, last_lsn, last_seq, rows, tombstones, bytes, indexed_at, trace)
		SELECT 's1', 'seg%d', concat('t', toString(number)), 'public.items', '', '', %d, 1, %d, 1, 1, 0, 100, toUnixTimestamp64Micro(now64(6)), '' FROM numbers(%d)`, seg, seg, seg, dests)
	if err := conn.Exec(b.Context(), q); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWideHistory is the publisher's and a reader's work at many
// tenants: every publish admits one segment of -wide-destinations
// destinations (10,000 inventory rows), after -wide-history such
// publishes. Each iteration seeds the next segment, then measures Pending,
// the publish and a 1,000-row page of one real destination at the new
// snapshot (its membership read afresh: a new version). It reports the
// p50 and p99 of each.
//
//	go test -run '^$' -bench 'WideHistory' -benchtime 20x ./shared/catalog/
func BenchmarkWideHistory(b *testing.B) {
	conn := &timedConn{Conn: chtest.Conn(b)}
	c := catalog.New(conn, catalog.Options{Prefix: "sluice"})
	if err := c.EnsureSchema(b.Context()); err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	store := openStore(b, "s1")
	var metas []packstore.PackMeta
	for j := range 2 {
		metas = append(metas, catalogtest.Write(b, store, catalogtest.Items, "shop1", fmt.Sprintf("real%d", j), benchRows("shop1", j*1000, 1000, uint64(j+1))))
	}
	index(b, c, store, metas...)
	l, err := c.AcquireLease(ctx, "bench", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	pub := func() catalog.Snapshot {
		res, err := c.Publish(ctx, l, time.Minute, 0)
		if err != nil {
			b.Fatal(err)
		}
		l = res.Lease
		return res.Snapshot
	}
	pub()
	seg := 0
	for range *wideHistory {
		seedSegment(b, conn, seg, *wideDests)
		seg++
		pub()
	}
	var pend, publ, read []time.Duration
	conn.reset()
	for b.Loop() {
		b.StopTimer()
		seedSegment(b, conn, seg, *wideDests)
		seg++
		b.StartTimer()
		t0 := time.Now()
		n, err := c.Pending(ctx)
		if err != nil || n != uint64(*wideDests) {
			b.Fatalf("pending %d, %v", n, err)
		}
		t1 := time.Now()
		s := pub()
		t2 := time.Now()
		p, err := c.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: catalogtest.Items.Name, Version: s.Version, Limit: 1000})
		if err != nil || len(p.Rows) != 1000 {
			b.Fatalf("read %d rows, %v", len(p.Rows), err)
		}
		t3 := time.Now()
		pend, publ, read = append(pend, t1.Sub(t0)), append(publ, t2.Sub(t1)), append(read, t3.Sub(t2))
		if s.NewPacks != uint64(*wideDests) {
			b.Fatalf("publish admitted %d, want %d", s.NewPacks, *wideDests)
		}
	}
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"pending", pend}, {"publish", publ}, {"read", read}} {
		p50, p99 := pct(m.ds)
		b.ReportMetric(p50, m.name+"-p50-ms")
		b.ReportMetric(p99, m.name+"-p99-ms")
	}
	if testing.Verbose() { // the per-statement breakdown
		fmt.Fprintf(os.Stderr, "statements of the measured iterations:\n%s\n", conn.summary())
	}
}
