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
			mem := memory.NewGoAllocator()
			out := NewPool(1 << 30) // the router's steady state: output buffers are reused
			r := rand.New(rand.NewPCG(7, 7))
			tenants := make([]tenant, c.dests)
			for i := range tenants {
				if c.typ.ID() == arrow.STRING {
					tenants[i] = strp(fmt.Sprintf("%08x-%04x-4000-8000-%012x", r.Uint32(), i, r.Uint64()&0xffffffffffff))
				} else {
					tenants[i] = strp(strconv.Itoa(1_000_000 + i))
				}
			}
			rec, _ := genBatch(b, r, mem, c.typ, tenants, c.rows, false)
			if c.narrow {
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
				if len(res.Parts) < c.dests*9/10 {
					b.Fatalf("%d parts", len(res.Parts))
				}
				res.Release()
			}
			b.StopTimer()
			cpu := cpuTime() - cpu0
			runtime.ReadMemStats(&ms1)
			rows := float64(b.N) * float64(c.rows)
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/rows, "allocs/row")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/rows, "ns/row")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/op")
			// CPU time of the whole process (all threads, GC included) per
			// op: steadier than wall time on a shared, loaded machine.
			b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
		})
	}
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
