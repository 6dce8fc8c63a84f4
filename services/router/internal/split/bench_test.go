package split

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// BenchmarkSplit: the targets are 1M rows across 10K destinations
// in at most 60 ms and 100K rows across 1,000 destinations in at most 6 ms.
// The batch is testSchema (7 source columns incl. utf8, bool, binary and a
// list, plus the 5 system columns), rows in random tenant order (the worst
// case for the gather), ~20% NULLs in the nullable columns.
func BenchmarkSplit(b *testing.B) {
	for _, c := range []struct {
		rows, dests int
		typ         arrow.DataType
		narrow      bool
	}{
		{100_000, 1_000, arrow.PrimitiveTypes.Int64, false},
		{1_000_000, 10_000, arrow.PrimitiveTypes.Int64, false},
		{100_000, 1_000, arrow.BinaryTypes.String, false},
		{1_000_000, 10_000, arrow.BinaryTypes.String, false},
		{100_000, 1_000, arrow.PrimitiveTypes.Int64, true},
		{1_000_000, 10_000, arrow.PrimitiveTypes.Int64, true},
	} {
		shape := "wide"
		if c.narrow {
			shape = "narrow"
		}
		b.Run(fmt.Sprintf("rows=%d/dests=%d/%s/%s", c.rows, c.dests, c.typ, shape), func(b *testing.B) {
			benchSplit(b, c.rows, c.dests, c.typ, c.narrow)
		})
	}
}

// setBaseline switches this round's speed-ups off (the chunked assignment,
// huge pages under pooled buffers, pooled list scratch) so the benchmark
// measures the ratio in one process; it returns the undo.
func setBaseline(on bool) func() {
	sa, hp, ps := serialAssign, poolHugePages, pooledScratch
	serialAssign, poolHugePages, pooledScratch = on, !on, !on
	return func() { serialAssign, poolHugePages, pooledScratch = sa, hp, ps }
}

// benchBatch generates the benchmarks' wide batch: n rows in random order
// over dests tenants, int64 values or uuid strings.
func benchBatch(b *testing.B, n, dests int, typ arrow.DataType) arrow.RecordBatch {
	r := rand.New(rand.NewPCG(7, 7))
	tenants := make([]tenant, dests)
	for i := range tenants {
		if typ.ID() == arrow.STRING {
			tenants[i] = strp(fmt.Sprintf("%08x-%04x-4000-8000-%012x", r.Uint32(), i, r.Uint64()&0xffffffffffff))
		} else {
			tenants[i] = strp(strconv.Itoa(1_000_000 + i))
		}
	}
	rec, _ := genBatch(b, r, memory.NewGoAllocator(), typ, tenants, n, false)
	return rec
}

// benchSplit splits one generated batch of n rows over dests destinations,
// routed by a column of type typ, b.N times.
func benchSplit(b *testing.B, n, dests int, typ arrow.DataType, narrowed bool) {
	out := NewPool(1 << 30) // the router's steady state: output buffers are reused
	rec := benchBatch(b, n, dests, typ)
	if narrowed {
		// tenant_id, id, name, amount + the system columns: no
		// bool, bytea or array source columns.
		rec = narrow(rec)
	}
	defer rec.Release()
	s := New(out, Auto(), 0)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		res, err := s.Split(rec)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Parts) < dests*9/10 {
			b.Fatalf("%d parts", len(res.Parts))
		}
		res.Release()
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&ms1)
	rows := float64(b.N) * float64(n)
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/rows, "allocs/row")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/rows, "ns/row")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/op")
	// CPU time of the whole process (all threads, GC included) per
	// op: steadier than wall time on a shared, loaded machine.
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// narrow keeps tenant_id, id, name, amount and the system columns.
func narrow(rec arrow.RecordBatch) arrow.RecordBatch {
	defer rec.Release()
	keep := []int{0, 1, 2, 4, 7, 8, 9, 10, 11}
	fields := make([]arrow.Field, len(keep))
	cols := make([]arrow.Array, len(keep))
	for i, k := range keep {
		fields[i], cols[i] = rec.Schema().Field(k), rec.Column(k)
	}
	md := rec.Schema().Metadata()
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
}

// BenchmarkSplitAB measures the baseline (setBaseline) and the current split
// of the same batch alternately, in one loop, so both see the same load on a
// shared machine: ms/op and cpu-ms/op of each, and new/base ratios of wall
// and CPU time. The order alternates every iteration.
func BenchmarkSplitAB(b *testing.B) {
	for _, c := range []struct {
		rows, dests int
		typ         arrow.DataType
	}{
		{100_000, 1_000, arrow.PrimitiveTypes.Int64},
		{1_000_000, 10_000, arrow.PrimitiveTypes.Int64},
		{100_000, 1_000, arrow.BinaryTypes.String},
		{1_000_000, 10_000, arrow.BinaryTypes.String},
	} {
		b.Run(fmt.Sprintf("rows=%d/dests=%d/%s/wide", c.rows, c.dests, c.typ), func(b *testing.B) {
			rec := benchBatch(b, c.rows, c.dests, c.typ)
			defer rec.Release()
			// Each side keeps its own pool, so each reuses buffers allocated
			// under its own settings.
			split := [2]*Splitter{New(NewPool(1<<30), Auto(), 0), New(NewPool(1<<30), Auto(), 0)}
			var wall, cpu [2]time.Duration
			run := func(side int) {
				defer setBaseline(side == 0)()
				c0, t0 := cpuTime(), time.Now()
				res, err := split[side].Split(rec)
				if err != nil {
					b.Fatal(err)
				}
				res.Release()
				wall[side] += time.Since(t0)
				cpu[side] += cpuTime() - c0
			}
			run(0) // warm both pools
			run(1)
			wall, cpu = [2]time.Duration{}, [2]time.Duration{}
			i := 0
			for b.Loop() {
				run(i % 2)
				run(1 - i%2)
				i++
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / float64(i) }
			b.ReportMetric(ms(wall[0]), "base-ms/op")
			b.ReportMetric(ms(wall[1]), "new-ms/op")
			b.ReportMetric(ms(cpu[0]), "base-cpu-ms/op")
			b.ReportMetric(ms(cpu[1]), "new-cpu-ms/op")
			b.ReportMetric(float64(wall[1])/float64(wall[0]), "wall-new/base")
			b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "cpu-new/base")
		})
	}
}
