package pgtypes

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/sluice-cdc/sluice/proto"
)

// benchAppend reports ns and allocations per value (one value per op); the
// builder is flushed every 64Ki values so memory stays bounded.
func benchAppend(b *testing.B, kind proto.Kind, values ...string) {
	mem := memory.NewGoAllocator()
	bld := NewBuilder(mem, kind)
	defer bld.Release()
	texts := make([][]byte, len(values))
	for i, v := range values {
		texts[i] = []byte(v)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := AppendText(bld, kind, texts[i%len(texts)]); err != nil {
			b.Fatal(err)
		}
		if bld.Len() == 1<<16 {
			bld.NewArray().Release()
		}
	}
}

func BenchmarkAppendTextInt64(b *testing.B) {
	benchAppend(b, proto.KindInt64, "1", "-9223372036854775808", "123456789", "42")
}

func BenchmarkAppendTextInt32(b *testing.B) {
	benchAppend(b, proto.KindInt32, "1", "-2147483648", "123456789", "42")
}

func BenchmarkAppendTextFloat64(b *testing.B) {
	benchAppend(b, proto.KindFloat64, "0.1", "1e+300", "NaN", "123.456")
}

func BenchmarkAppendTextText(b *testing.B) {
	benchAppend(b, proto.KindText, "hello", "a somewhat longer text value of sixty-four bytes or so, ok...", "x")
}

func BenchmarkAppendTextTimestampTZ(b *testing.B) {
	benchAppend(b, proto.KindTimestampTZ, "2026-01-01 12:34:56.123456+00", "1999-12-31 23:59:59+00", "0044-03-15 12:00:00+00 BC")
}

func BenchmarkAppendTextNumeric(b *testing.B) {
	benchAppend(b, proto.KindNumeric, "123.456", "-0.00000000000000000001", "NaN", "12345678901234567890.12345678901234567890")
}

func BenchmarkAppendTextIntArray(b *testing.B) {
	benchAppend(b, proto.ArrayKind(proto.KindInt32), "{1,2,3,NULL,5}", "{}", "{42}")
}

func BenchmarkAppendJSONTimestampTZ(b *testing.B) {
	dst := make([]byte, 0, 64)
	b.ReportAllocs()
	for i := int64(0); b.Loop(); i++ {
		dst, _ = AppendJSON(dst[:0], proto.KindTimestampTZ, 1767225600123456+i)
	}
}
