package packstore_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// markedID is an id whose 8 little-endian bytes occur once in a small file,
// so a test can find its column value and flip one of its bits.
const markedID = int64(0x5a17c0de00000101)

// smallFiles are an uncompressed pack and an uncompressed segment (far
// under packstore.CompressMinBytes) holding markedID, by name.
func smallFiles(t testing.TB) map[string][]byte {
	t.Helper()
	rows := []pt.Row{
		{ID: 1, Tenant: "shopA", Note: pt.Str("a"), Op: proto.OpInsert, LSN: 100, Seq: 1},
		{ID: markedID, Tenant: "shopA", Note: pt.Str("b"), Op: proto.OpInsert, LSN: 100, Seq: 2},
		{ID: 3, Tenant: "shopA", Op: proto.OpDelete, LSN: 101, Seq: 1},
	}
	rec := pt.Batch(nil, rows)
	defer rec.Release()
	pack, err := packstore.EncodePack([]arrow.RecordBatch{rec}, sampleMeta())
	if err != nil {
		t.Fatal(err)
	}
	other := pt.Batch(nil, []pt.Row{{ID: 9, Tenant: "shopB", Op: proto.OpInsert, LSN: 99, Seq: 1}})
	defer other.Release()
	seg, _, err := packstore.EncodeSegment([]packstore.SegmentPart{
		{Destination: "shopA", Recs: []arrow.RecordBatch{rec}},
		{Destination: "shopB", Recs: []arrow.RecordBatch{other}},
	}, sampleSegmentMeta())
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"pack": pack, "segment": seg}
}

// flipMarked returns data with the lowest bit of markedID's value flipped:
// the file stays well-formed and reads markedID+1 (or -1) instead.
func flipMarked(t testing.TB, data []byte) []byte {
	t.Helper()
	var le [8]byte
	binary.LittleEndian.PutUint64(le[:], uint64(markedID))
	if n := bytes.Count(data, le[:]); n != 1 {
		t.Fatalf("the marked id occurs %d times in the file, want 1", n)
	}
	bad := bytes.Clone(data)
	bad[bytes.Index(bad, le[:])] ^= 1
	return bad
}

// readIDs reads the id column the way arrow-go reads it on its own, with
// no verification.
func readIDs(t testing.TB, data []byte) []int64 {
	t.Helper()
	rd, err := ipc.NewFileReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var ids []int64
	for i := 0; i < rd.NumRecords(); i++ {
		rec, err := rd.RecordBatchAt(i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int64).Int64Values()...)
		rec.Release()
	}
	return ids
}

// TestChecksumRefusesFlippedValue: one flipped bit in an int64 value of an
// uncompressed pack or segment leaves a well-formed file that reads another
// id (the control: arrow-go reads it without an error, and before the
// checksum VerifyPack passed it); VerifyPack and DecodePack refuse it as
// corrupt, naming the file and both sums. The undamaged file passes.
func TestChecksumRefusesFlippedValue(t *testing.T) {
	for name, good := range smallFiles(t) {
		t.Run(name, func(t *testing.T) {
			if len(good) > packstore.CompressMinBytes {
				t.Fatalf("%d bytes: not a small, uncompressed file", len(good))
			}
			meta, _, err := packstore.VerifyPack(good, 0)
			if err != nil {
				t.Fatalf("the undamaged file: %v", err)
			}
			bad := flipMarked(t, good)
			ids := readIDs(t, bad)
			if ids[1] == markedID || ids[1]^markedID != 1 {
				t.Fatalf("control: the damaged file reads ids %x: the flip did not land in the value", ids)
			}
			_, _, verr := packstore.VerifyPack(bad, 0)
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			_, recs, derr := packstore.DecodePack(bad, mem)
			for _, r := range recs {
				r.Release()
			}
			mem.AssertSize(t, 0)
			for _, err := range []error{verr, derr} {
				if !errors.Is(err, packstore.ErrCorruptPack) {
					t.Fatalf("flipped value: got %v, want ErrCorruptPack", err)
				}
				for _, want := range []string{"checksum mismatch", meta.Path(), "footer says xxh3:", "the file hashes to xxh3:"} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("error %q does not say %q", err, want)
					}
				}
			}
		})
	}
}

// TestChecksumWrittenInBothSchemas: every file the writers make carries
// proto.MetaPackChecksum, the same value in the leading schema message and
// in the footer, and encoding the same rows twice gives the same bytes (a
// retried flush writes the same file: the store's Put stays idempotent).
func TestChecksumWrittenInBothSchemas(t *testing.T) {
	for name, data := range smallFiles(t) {
		t.Run(name, func(t *testing.T) {
			again := smallFiles(t)[name]
			if !bytes.Equal(data, again) {
				t.Fatal("two encodings of the same rows differ")
			}
			_, schema, err := packstore.VerifyPack(data, 0)
			if err != nil {
				t.Fatal(err)
			}
			sum, ok := schema.Metadata().GetValue(proto.MetaPackChecksum)
			if !ok || !strings.HasPrefix(sum, "xxh3:") || len(sum) != len("xxh3:")+16 {
				t.Fatalf("footer checksum %q (present %v)", sum, ok)
			}
			if n := bytes.Count(data, []byte(sum)); n != 2 {
				t.Fatalf("the checksum occurs %d times in the file, want 2 (schema message and footer)", n)
			}
		})
	}
	big := bigPack(t, 4000) // compressed: checked too
	if _, schema, err := packstore.VerifyPack(big, 0); err != nil {
		t.Fatal(err)
	} else if _, ok := schema.Metadata().GetValue(proto.MetaPackChecksum); !ok {
		t.Fatal("a compressed pack carries no checksum")
	}
}

// TestChecksumAbsentInOldFiles: a pack and a segment written before the
// checksum (testdata, by the encoder of the commit before it) have no
// proto.MetaPackChecksum and still verify and decode.
func TestChecksumAbsentInOldFiles(t *testing.T) {
	for _, f := range []string{"pack-v1-nochecksum.arrow", "segment-v2-nochecksum.arrow"} {
		t.Run(f, func(t *testing.T) {
			data, err := os.ReadFile("testdata/" + f)
			if err != nil {
				t.Fatal(err)
			}
			_, schema, err := packstore.VerifyPack(data, 0)
			if err != nil {
				t.Fatalf("an old file is refused: %v", err)
			}
			if _, ok := schema.Metadata().GetValue(proto.MetaPackChecksum); ok {
				t.Fatal("the old file has a checksum: not an old file")
			}
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			_, recs, err := packstore.DecodePack(data, mem)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				r.Release()
			}
			mem.AssertSize(t, 0)
		})
	}
}

// TestChecksumRefusesDamagedKeyOrValue: damage to the checksum's own key
// (a flipped letter would make the file look like an old one) or value is
// refused too.
func TestChecksumRefusesDamagedKeyOrValue(t *testing.T) {
	for name, good := range smallFiles(t) {
		_, schema, err := packstore.VerifyPack(good, 0)
		if err != nil {
			t.Fatal(err)
		}
		sum, _ := schema.Metadata().GetValue(proto.MetaPackChecksum)
		footer := bytes.LastIndex(good, []byte(sum)) // the footer's copy
		key := bytes.LastIndex(good, []byte(proto.MetaPackChecksum))
		for _, tc := range []struct {
			what string
			at   int
			xor  byte
		}{
			{"key letter", key + len(proto.MetaPackChecksum) - 1, 0x01},
			{"value digit", footer + len(sum) - 1, 0x01},
			{"value prefix", footer, 0x20},
		} {
			t.Run(fmt.Sprintf("%s/%s", name, tc.what), func(t *testing.T) {
				bad := bytes.Clone(good)
				bad[tc.at] ^= tc.xor
				if _, _, err := packstore.VerifyPack(bad, 0); !errors.Is(err, packstore.ErrCorruptPack) || !strings.Contains(err.Error(), "checksum") {
					t.Fatalf("damaged %s: got %v, want a corrupt file naming the checksum", tc.what, err)
				}
			})
		}
	}
}

// BenchmarkChecksumAlone: the checksum's own work, sealing at encode and
// checking at verify, without the rest of either, per file size: what
// the load of a shared machine hides in BenchmarkChecksum's difference.
func BenchmarkChecksumAlone(b *testing.B) {
	for _, n := range []int{5, 50000} {
		data := bigPack(b, n)
		_, schema, err := packstore.VerifyPack(data, 0)
		if err != nil {
			b.Fatal(err)
		}
		sum, _ := schema.Metadata().GetValue(proto.MetaPackChecksum)
		b.Run(fmt.Sprintf("seal/bytes=%d", len(data)), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			buf := bytes.Clone(data)
			for range b.N {
				copy(buf, data)
				if err := packstore.SealChecksum(buf, sum); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("check/bytes=%d", len(data)), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for range b.N {
				if err := packstore.CheckChecksum(data, schema); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkChecksum: what the checksum adds to encoding and to verifying,
// for a small uncompressed pack (the many-tenants shape) and a large zstd
// one: each with the checksum and without it (SetChecksum(false): sealing
// and checking skipped). MB/s are of file bytes.
func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{5, 50000} {
		var a []pt.Row
		for i := range n {
			note := fmt.Sprintf("note %d of a pack that is long enough to compress", i)
			a = append(a, pt.Row{ID: int64(i), Tenant: "shop1", Note: &note, Op: proto.OpInsert, LSN: 100 + uint64(i/10), Seq: uint64(i%10 + 1)})
		}
		rec := pt.Batch(nil, a)
		for _, on := range []bool{false, true} {
			restore := packstore.SetChecksum(on)
			data, err := packstore.EncodePack([]arrow.RecordBatch{rec}, sampleMeta())
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("encode/rows=%d/checksum=%v", n, on), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for range b.N {
					if _, err := packstore.EncodePack([]arrow.RecordBatch{rec}, sampleMeta()); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("verify/rows=%d/checksum=%v", n, on), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for range b.N {
					if _, _, err := packstore.VerifyPack(data, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
			restore()
		}
		rec.Release()
	}
}
