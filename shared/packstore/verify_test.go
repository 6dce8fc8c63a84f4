package packstore_test

import (
	"bytes"
	"errors"
	"fmt"
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

// bigPack is a pack of n rows over two batches, written by the real
// writer; from a few thousand rows its bodies are zstd-compressed.
func bigPack(t testing.TB, n int) []byte {
	t.Helper()
	var a, b []pt.Row
	for i := range n {
		note := fmt.Sprintf("note %d of a pack that is long enough to compress", i)
		r := pt.Row{ID: int64(i), Tenant: "shop1", Note: &note, Op: proto.OpInsert, LSN: 100 + uint64(i/10), Seq: uint64(i%10 + 1)}
		if i%2 == 0 {
			a = append(a, r)
		} else {
			b = append(b, r)
		}
	}
	r1, r2 := pt.Batch(nil, a), pt.Batch(nil, b)
	defer r1.Release()
	defer r2.Release()
	data, err := packstore.EncodePack([]arrow.RecordBatch{r1, r2}, sampleMeta())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// readsWithoutVerifying reads every batch the way arrow-go does on its
// own (footer, blocks, record batches), without VerifyPack.
func readsWithoutVerifying(data []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	rd, err := ipc.NewFileReader(bytes.NewReader(data))
	if err != nil {
		return err
	}
	defer rd.Close()
	for i := 0; i < rd.NumRecords(); i++ {
		rec, err := rd.RecordBatchAt(i)
		if err != nil {
			return err
		}
		rec.Release()
	}
	return nil
}

// TestVerifyPackRefusesDamagedBody: a pack whose body bytes were
// overwritten in the middle, its footer intact, is refused as corrupt by
// VerifyPack, DecodePack and the footer read stays possible. The control:
// arrow-go's own reader reads every batch of the damaged compressed pack
// (some of them) without an error (it decompresses each buffer to its declared length and
// never reaches the frame's checksum), which is how such a pack reached
// the staging writer and the engine.
func TestVerifyPackRefusesDamagedBody(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rows       int
		compressed bool
	}{{"compressed", 4000, true}, {"uncompressed", 40, false}} {
		t.Run(tc.name, func(t *testing.T) {
			good := bigPack(t, tc.rows)
			if _, _, err := packstore.VerifyPack(good, 0); err != nil {
				t.Fatalf("the undamaged pack: %v", err)
			}
			refused, unseen := 0, 0
			for _, n := range []int{1, 8, 64, 512} {
				bad := pt.DamageBody(good, n)
				if _, _, err := packstore.ReadPackMeta(bad); err != nil {
					t.Fatalf("damage of %d bytes hit the footer: %v", n, err)
				}
				if readsWithoutVerifying(bad) == nil {
					unseen++
				}
				_, _, verr := packstore.VerifyPack(bad, 0)
				mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
				_, recs, derr := packstore.DecodePack(bad, mem)
				for _, r := range recs {
					r.Release()
				}
				mem.AssertSize(t, 0) // a failed decode of its second batch releases the first
				if (verr == nil) != (derr == nil) {
					t.Fatalf("%d bytes: VerifyPack says %v, DecodePack %v", n, verr, derr)
				}
				if verr != nil {
					if !errors.Is(verr, packstore.ErrCorruptPack) {
						t.Fatalf("%d bytes: %v does not wrap ErrCorruptPack", n, verr)
					}
					refused++
				}
			}
			// Every file carries the whole file's checksum
			// (proto.MetaPackChecksum): every damage is caught, compressed
			// or not. (Without it, a compressed body's zstd frames still
			// catch any damage, an uncompressed one only damage that breaks
			// the structure: TestChecksumRefusesFlippedValue.)
			if refused != 4 {
				t.Fatalf("refused %d of 4 damaged packs", refused)
			}
			if tc.compressed && unseen == 0 {
				t.Fatal("control: arrow-go's reader refused every damaged pack itself: the damage is not the kind that reached the engine")
			}
			t.Logf("%d of 4 damaged packs refused; arrow-go alone read %d of them without an error", refused, unseen)
		})
	}
}

// TestVerifyPackChecksDeclaredColumns: a pack whose column holds another
// Arrow type than its declared kind, or whose footer counts disagree with
// its rows, is corrupt; the writer's own packs pass.
func TestVerifyPackChecksDeclaredColumns(t *testing.T) {
	// "note" declares kind int64 but holds strings.
	sc := pt.Schema()
	fields := sc.Fields()
	fields[2].Metadata = arrow.NewMetadata([]string{proto.MetaKind, proto.MetaPgType}, []string{string(proto.KindInt64), "bigint"})
	md := sc.Metadata()
	lying := arrow.NewSchema(fields, &md)
	rec := pt.Batch(nil, []pt.Row{{ID: 1, Tenant: "a", Note: pt.Str("x"), Op: proto.OpInsert, LSN: 5, Seq: 1}})
	defer rec.Release()
	relabelled := array.NewRecordBatch(lying, rec.Columns(), rec.NumRows())
	defer relabelled.Release()
	data, err := packstore.EncodePack([]arrow.RecordBatch{relabelled}, sampleMeta())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := packstore.VerifyPack(data, 0); !errors.Is(err, packstore.ErrCorruptPack) || !strings.Contains(err.Error(), `"note"`) {
		t.Fatalf("kind mismatch: got %v, want a corrupt pack naming the column", err)
	}
	good, err := packstore.EncodePack([]arrow.RecordBatch{rec}, sampleMeta())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := packstore.VerifyPack(good, 0); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyPackBoundsMemory: a batch that decompresses to more than the
// limit is refused before it is decompressed.
func TestVerifyPackBoundsMemory(t *testing.T) {
	data := bigPack(t, 4000)
	if _, _, err := packstore.VerifyPack(data, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := packstore.VerifyPack(data, 16<<10); !errors.Is(err, packstore.ErrCorruptPack) || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("16 KiB limit: got %v", err)
	}
}

// BenchmarkVerifyPack: what verifying a pack whole costs the indexer, for
// a small pack (the many-tenants shape, uncompressed) and a large one
// (zstd, two batches): MB/s of pack bytes.
func BenchmarkVerifyPack(b *testing.B) {
	for _, n := range []int{5, 50000} {
		data := bigPack(b, n)
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for range b.N {
				if _, _, err := packstore.VerifyPack(data, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
