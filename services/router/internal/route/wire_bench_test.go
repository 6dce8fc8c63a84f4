package route

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/router/internal/split"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
)

// BenchmarkPartitionWire measures the three candidate bodies of a partition
// message holding many destinations (100,000 rows, one partition, 10 and
// 10,000 destinations): ColDestination as utf8, as dictionary<int32, utf8>,
// and one IPC record per destination in one stream (no column). encode-ms
// is the router's cost to build and encode the body from the split; read-ms
// the flusher's to decode it and make one zero-copy slice per destination
// (ColDestination dropped); both CPU time (the process's, GC included: the
// machine is shared, wall time measures the neighbours); bytes the body's
// size.
func BenchmarkPartitionWire(b *testing.B) {
	const rows = 100_000
	for _, dests := range []int{10, 10_000} {
		mem := memory.NewGoAllocator()
		rec := benchBatch(b, mem, rows, dests)
		h := New(Options{Partitions: 1, EncodeWorkers: 1})
		res, err := split.New(mem, split.Auto(), 1).SplitBy(rec, h.rank)
		rec.Release()
		if err != nil {
			b.Fatal(err)
		}
		base := nats.Header{}
		for _, form := range []string{"utf8", "dictionary", "records"} {
			b.Run(fmt.Sprintf("dests=%d/%s", dests, form), func(b *testing.B) {
				var enc, read time.Duration
				runtime.GC()
				var size int
				for b.Loop() {
					t0 := cpuTime()
					body := wireEncode(b, h, base, res, form)
					t1 := cpuTime()
					n := wireRead(b, mem, body, form)
					t2 := cpuTime()
					if n != len(res.Parts) {
						b.Fatalf("%d slices for %d destinations", n, len(res.Parts))
					}
					enc, read, size = enc+t1-t0, read+t2-t1, len(body)
				}
				per := float64(b.N) * 1e6
				b.ReportMetric(float64(enc.Nanoseconds())/per, "encode-ms")
				b.ReportMetric(float64(read.Nanoseconds())/per, "read-ms")
				b.ReportMetric(float64(size), "bytes")
			})
		}
		res.Release()
	}
}

func wireEncode(b *testing.B, h *Handler, base nats.Header, res *split.Result, form string) []byte {
	if form == "records" {
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(res.Parts[0].Batch.Schema()))
		for _, p := range res.Parts {
			if err := w.Write(p.Batch); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		return buf.Bytes()
	}
	defer func(v bool) { destDictionary = v }(destDictionary)
	destDictionary = form == "dictionary"
	msgs, err := h.encodePartitions("in", base, res, res.Parts)
	if err != nil || len(msgs) != 1 {
		b.Fatalf("%d messages, %v", len(msgs), err)
	}
	return msgs[0].Data
}

// wireRead decodes body and slices it per destination as the flusher
// does; it returns the slices made.
func wireRead(b *testing.B, mem memory.Allocator, body []byte, form string) int {
	if form == "records" {
		r, err := ipc.NewReader(bytes.NewReader(body), ipc.WithAllocator(mem))
		if err != nil {
			b.Fatal(err)
		}
		defer r.Release()
		n := 0
		for r.Next() {
			rec := r.RecordBatch()
			rec.Retain() // what a slice held past the next read costs
			rec.Release()
			n++
		}
		if r.Err() != nil {
			b.Fatal(r.Err())
		}
		return n
	}
	rec, err := arrowcodec.Decode(body, mem)
	if err != nil {
		b.Fatal(err)
	}
	defer rec.Release()
	runs, col, err := proto.DestinationRuns(rec)
	if err != nil {
		b.Fatal(err)
	}
	md := rec.Schema().Metadata()
	table := array.NewRecordBatch(arrow.NewSchema(rec.Schema().Fields()[:col], &md), rec.Columns()[:col], rec.NumRows())
	defer table.Release()
	for _, r := range runs {
		s := table.NewSlice(r.Lo, r.Hi)
		s.Release()
	}
	return len(runs)
}
