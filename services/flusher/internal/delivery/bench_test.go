package delivery

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
)

// BenchmarkFanout measures the flush fan-out: N destinations with one
// message each are buffered, then flushed at once by 8 workers; it reports
// destination flushes per second, rows per second, and peak heap and RSS
// against the memory budget.
//
//	go test -run XXX -bench Fanout -benchtime 1x ./services/flusher/internal/delivery/
func BenchmarkFanout(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("dests=%d", n), func(b *testing.B) {
			e := newEnv(b, func(c *cfgpkg.Config) {
				c.Delivery.Partitions = 16
				c.Delivery.Workers = 8
				c.Delivery.MaxAckPending = 20000
				c.Delivery.MemoryBudget = 256 << 20
			})
			r := e.start(b, "bench", nil)
			var peakHeap atomic.Uint64
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				var ms runtime.MemStats
				for {
					runtime.ReadMemStats(&ms)
					if ms.HeapInuse > peakHeap.Load() {
						peakHeap.Store(ms.HeapInuse)
					}
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}()
			var flushTime time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				base := testutil.ToFloat64(r.m.m.flushes.WithLabelValues("ok"))
				publishMany(b, e, n, i)
				waitFor(b, 2*time.Minute, "fetched", func() bool { return r.m.Status().BufferedRows == int64(n) })
				t0 := time.Now()
				r.m.evaluate(time.Now().Add(2 * time.Hour)) // every buffer is due
				waitFor(b, 10*time.Minute, "flushed", func() bool {
					return testutil.ToFloat64(r.m.m.flushes.WithLabelValues("ok")) >= base+float64(n)
				})
				flushTime += time.Since(t0)
			}
			b.StopTimer()
			close(stop)
			<-done
			total := float64(n * b.N)
			b.ReportMetric(total/flushTime.Seconds(), "dest-flushes/s")
			b.ReportMetric(total/flushTime.Seconds(), "rows/s")
			b.ReportMetric(float64(peakHeap.Load())/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(vmHWM())/(1<<10), "peak-rss-MiB")
			b.ReportMetric(float64(e.cfg.Delivery.MemoryBudget)/(1<<20), "budget-MiB")
		})
	}
}

// vmHWM is the process's peak resident set in KiB.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb
		}
	}
	return 0
}
