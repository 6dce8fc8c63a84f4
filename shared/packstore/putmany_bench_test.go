package packstore

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkPutMany writes group commits of 512 five-KiB packs, one per
// destination directory (1,000 tenants flushed every second), syncing the
// filesystem twice per group against fsyncing every file and directory.
func BenchmarkPutMany(b *testing.B) {
	for _, each := range []bool{false, true} {
		name := "syncfs"
		if each {
			name = "fsync-each"
		}
		b.Run(name, func(b *testing.B) {
			d, err := OpenDir(b.TempDir(), "local")
			if err != nil {
				b.Fatal(err)
			}
			d.fsyncEach = each
			data := make([]byte, 5<<10)
			round := 0
			group := func() {
				items := make([]PutItem, 512)
				for i := range items {
					items[i] = PutItem{Path: fmt.Sprintf("d%04d/public.t/p%06d-%04d.arrow", i, round, i), Data: data}
				}
				round++
				for _, err := range d.PutMany(context.Background(), items) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			group() // the directories exist in steady state
			b.ResetTimer()
			for b.Loop() {
				group()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/group")
		})
	}
}
