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

func BenchmarkAppendJSONFloat64(b *testing.B) {
	vals := []float64{0.1, 123.456, 1.5e-10, 18014398509529112, 9.87654321e20, -2.5}
	dst := make([]byte, 0, 64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		dst, _ = AppendJSON(dst[:0], proto.KindFloat64, vals[i%len(vals)])
	}
}

func BenchmarkShapeComposite(b *testing.B) {
	inner := &Shape{form: formComposite, names: []string{"a", "b", "c"},
		attrs: []*Shape{numberShape, stringShape, {form: formArray, delim: ',', elem: numberShape}}}
	text := []byte(`(2,"a ""quoted"", text","{1,2,NULL,4}")`)
	dst := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = inner.AppendJSON(dst[:0], text)
	}
}
