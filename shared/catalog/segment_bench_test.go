package catalog_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// BenchmarkIndexSegments is BenchmarkIndexSmallPacks for segments: the
// same 1,000 destinations of 5 rows each, indexed as one segment (one
// statement over one file) against 1,000 per-destination packs in one
// batch (staged into one file on chDB, as the indexer does), and a batch
// of 16 segments of 64 destinations staged against read in place (whether
// staging still pays for small segments). It reports destination slices
// (pack, destination) per second and rows per second.
func BenchmarkIndexSegments(b *testing.B) {
	const rows = 5
	for _, c := range []struct {
		name          string
		files, dests  int // files per batch, destinations per file
		segment, flat bool
	}{
		{"segments=1/dests=1000", 1, 1000, true, false},
		{"packs=1000/staged", 1000, 1, false, false},
		{"segments=16/dests=64/staged", 16, 64, true, false},
		{"segments=16/dests=64/in-place", 16, 64, true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			conn := chtest.Conn(b)
			cat := newCatalog(b, conn)
			catalog.SetNoStaging(cat, c.flat)
			store := openStore(b, "s1")
			t0 := time.Now()
			var refs [][]catalog.PackRef
			for i := range b.N {
				var batch []catalog.PackRef
				for f := range c.files {
					var meta packstore.PackMeta
					if c.segment {
						var parts []catalogtest.Part
						for d := range c.dests {
							dest := fmt.Sprintf("t%d", f*c.dests+d)
							parts = append(parts, catalogtest.Part{Destination: dest, Rows: benchRows(dest, i*rows, rows, uint64(i+1))})
						}
						meta = catalogtest.WriteSegment(b, store, catalogtest.Items, proto.SegmentID(t0, "bench", uint64(i*c.files+f)), parts)
					} else {
						dest := fmt.Sprintf("t%d", f)
						meta = catalogtest.Write(b, store, catalogtest.Items, dest, fmt.Sprintf("p%d-%d", i, f), benchRows(dest, i*rows, rows, uint64(i+1)))
					}
					ref, err := catalog.ReadRef(b.Context(), store, meta.Path())
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
				st, err := cat.Index(b.Context(), store, refs[i])
				if err != nil {
					b.Fatal(err)
				}
				if st.Rows != c.files*c.dests*rows {
					b.Fatalf("indexed %d rows", st.Rows)
				}
			}
			el := time.Since(start).Seconds()
			slices := float64(b.N * c.files * c.dests)
			b.ReportMetric(slices/el, "dests/s")
			b.ReportMetric(slices*rows/el, "rows/s")
			b.ReportMetric(el*1e3/float64(b.N), "ms/batch")
		})
	}
}
