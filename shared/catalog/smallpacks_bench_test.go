package catalog_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// BenchmarkIndexSmallPacks indexes batches of many small packs: the shape
// of 1,000 tenants flushed every second (one pack per tenant per flush, a
// few rows each). It reports packs/s, the figure that bounds how many
// destinations one indexer keeps up with.
func BenchmarkIndexSmallPacks(b *testing.B) {
	for _, c := range []struct {
		perBatch, packRows int
		inPlace            bool
	}{{256, 5, false}, {256, 5, true}, {64, 5, false}, {64, 5, true}} {
		mode := "staged"
		if c.inPlace {
			mode = "in-place"
		}
		b.Run(fmt.Sprintf("packs=%d/rows=%d/%s", c.perBatch, c.packRows, mode), func(b *testing.B) {
			conn := chtest.Conn(b)
			cat := newCatalog(b, conn)
			catalog.SetNoStaging(cat, c.inPlace)
			store := openStore(b, "s1")
			var refs [][]catalog.PackRef
			for i := range b.N {
				var batch []catalog.PackRef
				for j := range c.perBatch {
					dest := fmt.Sprintf("t%d", j)
					m := catalogtest.Write(b, store, catalogtest.Items, dest, fmt.Sprintf("p%d-%d", i, j), benchRows(dest, i*c.packRows, c.packRows, uint64(i+1)))
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
				if _, err := cat.Index(b.Context(), store, refs[i]); err != nil {
					b.Fatal(err)
				}
			}
			el := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N*c.perBatch)/el, "packs/s")
			b.ReportMetric(el*1e3/float64(b.N), "ms/batch")
		})
	}
}
