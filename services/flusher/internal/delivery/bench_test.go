package delivery

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
)

// BenchmarkFanout measures the flush fan-out: N destinations with one
// message each are buffered, then flushed at once by 8 workers; it reports
// destination flushes per second, rows per second, files (segments)
// written per second, and peak heap and RSS against the memory budget.
//
//	go test -run XXX -bench Fanout -benchtime 1x ./services/flusher/internal/delivery/
func BenchmarkFanout(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("dests=%d", n), func(b *testing.B) { benchFanout(b, n, 256<<20, false) })
	}
	// 10,000 buffered messages count ~140 MiB: with a 64 MiB budget the
	// watermark stops fetching and flushes the largest buffers first.
	b.Run("dests=10000/budget=64MiB", func(b *testing.B) { benchFanout(b, 10000, 64<<20, false) })
}

// BenchmarkFanoutNoGroupCommit is the same with every flush committed alone
// (the pre-group-commit path), for before/after ratios in one session.
func BenchmarkFanoutNoGroupCommit(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("dests=%d", n), func(b *testing.B) { benchFanout(b, n, 256<<20, true) })
	}
}

func benchFanout(b *testing.B, n int, budget cfgpkg.ByteSize, single bool) {
	e := newEnv(b, func(c *cfgpkg.Config) {
		c.Delivery.Partitions = 16
		c.Delivery.Workers = 8
		c.Delivery.MaxAckPending = 20000
		c.Delivery.MemoryBudget = budget
		// Not a lease test: a loaded machine must not lose leases mid-run.
		c.Delivery.LeaseTTL = 30 * time.Second
	})
	limit := SetMemoryLimit(e.cfg.Delivery)
	b.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	r := e.start(b, "bench", func(m *Manager) { m.noGroupCommit = single })
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
	// Reset the peak RSS (VmHWM) so each run reports its own.
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	var flushTime time.Duration
	files0 := testutil.ToFloat64(r.m.m.filesWritten)
	var heapPerMsg, countedPerMsg float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		base := testutil.ToFloat64(r.m.m.flushes.WithLabelValues("ok"))
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		publishMany(b, e, n, i)
		// Every message buffered, or fetching stopped at the memory budget.
		waitFor(b, 2*time.Minute, "fetched", func() bool {
			st := r.m.Status()
			return st.BufferedRows == int64(n) || st.BufferedBytes >= st.MemoryBudget
		})
		st := r.m.Status()
		runtime.GC()
		runtime.ReadMemStats(&ms1)
		heapPerMsg = float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc)) / float64(st.BufferedRows)
		countedPerMsg = float64(st.BufferedBytes) / float64(st.BufferedRows)
		t0 := time.Now()
		var due time.Time
		waitFor(b, 10*time.Minute, "flushed", func() bool {
			if time.Since(due) > 200*time.Millisecond {
				due = time.Now()
				r.m.evaluate(time.Now().Add(2 * time.Hour)) // every buffer is due
			}
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
	b.ReportMetric((testutil.ToFloat64(r.m.m.filesWritten)-files0)/flushTime.Seconds(), "files/s")
	b.ReportMetric(float64(peakHeap.Load())/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(vmHWM())/(1<<10), "peak-rss-MiB")
	b.ReportMetric(float64(e.cfg.Delivery.MemoryBudget)/(1<<20), "budget-MiB")
	b.ReportMetric(float64(limit)/(1<<20), "limit-MiB")
	b.ReportMetric(heapPerMsg, "heap-B/msg")
	b.ReportMetric(countedPerMsg, "counted-B/msg")
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
