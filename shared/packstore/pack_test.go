package packstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

func sampleMeta() packstore.PackMeta {
	return packstore.PackMeta{PackID: "01900000-0000-7000-8000-000000000001", StoreID: "local", Destination: "shop1", Table: "public.items", Schema: "abc123"}
}

func TestEncodeDecodePack(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	r1 := pt.Batch(mem, []pt.Row{
		{ID: 1, Tenant: "shop1", Note: pt.Str("x"), Op: proto.OpInsert, LSN: 200, Seq: 3},
		{ID: 2, Tenant: "shop1", Op: proto.OpUpdate, LSN: 200, Seq: 4, Unchanged: []string{"note"}},
	})
	defer r1.Release()
	r2 := pt.Batch(mem, []pt.Row{
		{ID: 3, Tenant: "shop1", Op: proto.OpDelete, LSN: 100, Seq: 9},
		{ID: 4, Tenant: "shop1", Op: proto.OpMoveOut, LSN: 300, Seq: 1},
	})
	defer r2.Release()
	data, err := packstore.EncodePack([]arrow.RecordBatch{r1, r2}, sampleMeta())
	if err != nil {
		t.Fatal(err)
	}
	meta, schema, err := packstore.ReadPackMeta(data)
	if err != nil {
		t.Fatal(err)
	}
	want := sampleMeta()
	want.Rows, want.Tombstones = 4, 2
	want.First, want.Last = proto.Position{LSN: 100, Seq: 9}, proto.Position{LSN: 300, Seq: 1}
	if meta != want {
		t.Fatalf("meta\n got %+v\nwant %+v", meta, want)
	}
	if v, _ := schema.Metadata().GetValue(proto.MetaPrimaryKey); v != "id" {
		t.Fatalf("table metadata lost: %v", schema.Metadata())
	}
	if k, _ := schema.Field(0).Metadata.GetValue(proto.MetaKind); k != "int64" {
		t.Fatalf("field metadata lost")
	}
	m2, recs, err := packstore.DecodePack(data, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	if m2 != want || len(recs) != 2 {
		t.Fatalf("decode: %+v, %d batches", m2, len(recs))
	}
	if !array.RecordEqual(recs[0], r1) || !array.RecordEqual(recs[1], r2) {
		t.Fatal("rows changed in the round trip")
	}
	// Encoding is deterministic: the same input makes the same bytes, so a
	// retried Put of a re-encoded pack is an idempotent no-op.
	again, err := packstore.EncodePack([]arrow.RecordBatch{r1, r2}, sampleMeta())
	if err != nil || !bytes.Equal(again, data) {
		t.Fatalf("re-encoding differs (%v)", err)
	}
}

func TestEncodePackRefuses(t *testing.T) {
	rec := pt.Batch(nil, []pt.Row{{ID: 1, Tenant: "a", Op: proto.OpInsert, LSN: 5, Seq: 1}})
	defer rec.Release()
	for name, mod := range map[string]func(*packstore.PackMeta){
		"no pack id":       func(m *packstore.PackMeta) { m.PackID = "" },
		"bad destination":  func(m *packstore.PackMeta) { m.Destination = "a b" },
		"bad table":        func(m *packstore.PackMeta) { m.Table = "items" },
		"no fingerprint":   func(m *packstore.PackMeta) { m.Schema = "" },
		"wrong rows":       func(m *packstore.PackMeta) { m.Rows = 7 },
		"wrong tombstones": func(m *packstore.PackMeta) { m.Tombstones = 1 },
		"wrong last":       func(m *packstore.PackMeta) { m.Last = proto.Position{LSN: 9} },
	} {
		m := sampleMeta()
		mod(&m)
		if _, err := packstore.EncodePack([]arrow.RecordBatch{rec}, m); !errors.Is(err, packstore.ErrBadPackMeta) {
			t.Errorf("%s: got %v, want ErrBadPackMeta", name, err)
		}
	}
	if _, err := packstore.EncodePack(nil, sampleMeta()); !errors.Is(err, packstore.ErrBadPackMeta) {
		t.Errorf("no batches: got %v", err)
	}
}

func TestDecodeCorrupt(t *testing.T) {
	rec := pt.Batch(nil, []pt.Row{{ID: 1, Tenant: "a", Op: proto.OpInsert, LSN: 5, Seq: 1}})
	defer rec.Release()
	data, err := packstore.EncodePack([]arrow.RecordBatch{rec}, sampleMeta())
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"empty":     nil,
		"truncated": data[:len(data)/2],
		"garbage":   []byte("ARROW1\x00\x00garbage garbage garbage garbage ARROW1"),
	} {
		if _, _, err := packstore.DecodePack(b, nil); !errors.Is(err, packstore.ErrCorruptPack) {
			t.Errorf("%s: got %v, want ErrCorruptPack", name, err)
		}
		if _, _, err := packstore.ReadPackMeta(b); !errors.Is(err, packstore.ErrCorruptPack) {
			t.Errorf("%s meta: got %v, want ErrCorruptPack", name, err)
		}
	}
}

func FuzzDecodePack(f *testing.F) {
	rec := pt.Batch(nil, []pt.Row{{ID: 1, Tenant: "a", Op: proto.OpInsert, LSN: 5, Seq: 1}})
	data, err := packstore.EncodePack([]arrow.RecordBatch{rec}, sampleMeta())
	rec.Release()
	if err != nil {
		f.Fatal(err)
	}
	// Each damaged seed also without its checksum (pt.Unchecksummed), so
	// that mutations reach the structural checks behind it.
	f.Add(data)
	f.Add(data[:len(data)-10])
	f.Add(pt.DamageBody(data, 4))
	f.Add(pt.DamageBody(pt.Unchecksummed(data), 4))
	var many []pt.Row
	for i := range 3000 {
		many = append(many, pt.Row{ID: int64(i), Tenant: "a", Note: pt.Str(fmt.Sprint("note ", i)), Op: proto.OpInsert, LSN: 5, Seq: uint64(i + 1)})
	}
	rec = pt.Batch(nil, many)
	big, err := packstore.EncodePack([]arrow.RecordBatch{rec}, sampleMeta())
	rec.Release()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(big) // zstd-compressed
	f.Add(pt.DamageBody(big, 16))
	f.Add(pt.DamageBody(pt.Unchecksummed(big), 16))
	parts, release := sampleParts(nil)
	seg, _, err := packstore.EncodeSegment(parts, sampleSegmentMeta())
	release()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seg)
	f.Add(pt.DamageBody(seg, 4))
	f.Add(pt.DamageBody(pt.Unchecksummed(seg), 4))
	f.Fuzz(func(t *testing.T, b []byte) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		meta, recs, err := packstore.DecodePack(b, mem)
		vmeta, _, verr := packstore.VerifyPack(b, 0)
		if (err == nil) != (verr == nil) || meta != vmeta {
			t.Fatalf("DecodePack: %v, VerifyPack: %v", err, verr)
		}
		if err != nil {
			if !errors.Is(err, packstore.ErrCorruptPack) {
				t.Fatalf("error not classified as corrupt: %v", err)
			}
		}
		// What DecodePack accepts is valid throughout and what its footer says.
		var rows int64
		for _, r := range recs {
			if err := array.ValidateRecordFull(r); err != nil {
				t.Fatalf("accepted an invalid batch: %v", err)
			}
			rows += r.NumRows()
			r.Release()
		}
		if rows != meta.Rows {
			t.Fatalf("accepted %d rows, footer says %d", rows, meta.Rows)
		}
		if _, err := meta.Entries(); err != nil {
			t.Fatalf("accepted a segment whose index does not parse: %v", err)
		}
		mem.AssertSize(t, 0)
	})
}
