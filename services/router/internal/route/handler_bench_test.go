package route

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/router/internal/split"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// benchBatch is a CHANGES batch shaped like split's benchmark batch (the
// "wide" shape: utf8, bool, float, list<utf8>, binary source columns plus
// the system columns), tenants in random order, ~20% NULLs.
func benchBatch(tb testing.TB, mem memory.Allocator, rows, dests int) arrow.RecordBatch {
	tb.Helper()
	md := arrow.NewMetadata([]string{proto.MetaTable, proto.MetaPrimaryKey, proto.MetaRouting}, []string{"public.orders", "id", "tenant_id"})
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "tenant_id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "paid", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "amount", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "blob", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: proto.ColOp, Type: arrow.PrimitiveTypes.Int8},
		{Name: proto.ColLSN, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColSeq, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColCommitTime, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{Name: proto.ColUnchanged, Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, &md)
	r := rand.New(rand.NewPCG(7, 7))
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	lsn := uint64(1 << 32)
	for i := range rows {
		lsn += uint64(1 + r.IntN(3))
		b.Field(0).(*array.Int64Builder).Append(int64(1_000_000 + r.IntN(dests)))
		b.Field(1).(*array.Int64Builder).Append(int64(i))
		if r.IntN(5) == 0 {
			for _, f := range []int{2, 3, 4, 6} {
				b.Field(f).AppendNull()
			}
		} else {
			b.Field(2).(*array.StringBuilder).Append(strings.Repeat("n", r.IntN(20)) + strconv.Itoa(i))
			b.Field(3).(*array.BooleanBuilder).Append(i%3 == 0)
			b.Field(4).(*array.Float64Builder).Append(float64(i) / 7)
			b.Field(6).(*array.BinaryBuilder).Append([]byte{byte(i), byte(i >> 8)})
		}
		lb := b.Field(5).(*array.ListBuilder)
		if r.IntN(4) == 0 {
			lb.AppendNull()
		} else {
			lb.Append(true)
			for k := range r.IntN(4) {
				lb.ValueBuilder().(*array.StringBuilder).Append(fmt.Sprintf("t%d.%d", i, k))
			}
		}
		b.Field(7).(*array.Int8Builder).Append(proto.OpInsert)
		b.Field(8).(*array.Uint64Builder).Append(lsn)
		b.Field(9).(*array.Uint64Builder).Append(1)
		b.Field(10).(*array.TimestampBuilder).Append(arrow.Timestamp(lsn))
		b.Field(11).(*array.ListBuilder).AppendNull()
	}
	return b.NewRecordBatch()
}

// BenchmarkHandleWork is the CPU work of Handle for one input batch without
// the bus: decode the body, split it, encode every partition's message,
// release (one message per partition). Stage timings are reported per op (wall, so they include waiting
// for the CPU on a loaded machine); cpu-ms/op is the whole process's CPU.
func BenchmarkHandleWork(b *testing.B) {
	for _, c := range []struct{ rows, dests int }{{100_000, 1_000}, {1_000_000, 10_000}} {
		for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
			b.Run(fmt.Sprintf("rows=%d/dests=%d/encoders=%d", c.rows, c.dests, workers), func(b *testing.B) {
				mem := memory.NewGoAllocator()
				rec := benchBatch(b, mem, c.rows, c.dests)
				body, err := arrowcodec.Encode(rec)
				if err != nil {
					b.Fatal(err)
				}
				// A body over the decoder's 64 MiB limit (the 1M-row batch;
				// the reader never sends one) is split as built, undecoded.
				if _, err := arrowcodec.Decode(body, mem); err != nil {
					body = nil
				} else {
					rec.Release()
					rec = nil
				}
				h := New(Options{
					Splitter:      split.New(split.NewPool(1<<30), split.Auto(), 0),
					Partitions:    16,
					MaxPayload:    8 << 20,
					EncodeWorkers: workers,
					Log:           slog.New(slog.NewTextHandler(io.Discard, nil)),
				})
				base := nats.Header{}
				base.Set(proto.HeaderTable, "public.orders")
				var dec, spl, enc time.Duration
				var ms0, ms1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms0)
				cpu0 := cpuTime()
				b.ResetTimer()
				for b.Loop() {
					t0 := time.Now()
					in := rec
					if body != nil {
						in, err = arrowcodec.Decode(body, h.o.DecodeMem)
						if err != nil {
							b.Fatal(err)
						}
					} else {
						in.Retain()
					}
					t1 := time.Now()
					res, err := h.o.Splitter.SplitBy(in, h.rank)
					in.Release()
					if err != nil {
						b.Fatal(err)
					}
					t2 := time.Now()
					msgs, err := h.encodePartitions("in-1", base, res, res.Parts)
					if err != nil {
						b.Fatal(err)
					}
					t3 := time.Now()
					if len(msgs) < 16 {
						b.Fatalf("%d messages for 16 partitions", len(msgs))
					}
					res.Release()
					dec, spl, enc = dec+t1.Sub(t0), spl+t2.Sub(t1), enc+t3.Sub(t2)
				}
				b.StopTimer()
				cpu := cpuTime() - cpu0
				if rec != nil {
					rec.Release()
				}
				runtime.ReadMemStats(&ms1)
				n := float64(b.N)
				ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / n }
				b.ReportMetric(ms(dec), "decode-ms/op")
				b.ReportMetric(ms(spl), "split-ms/op")
				b.ReportMetric(ms(enc), "encode-ms/op")
				b.ReportMetric(ms(cpu), "cpu-ms/op")
				b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n/float64(c.rows), "allocs/row")
			})
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
