package packstore_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

var segTime = time.Date(2026, 12, 2, 0, 30, 0, 0, time.UTC)

func sampleSegmentMeta() packstore.SegmentMeta {
	return packstore.SegmentMeta{PackID: proto.SegmentID(segTime, "w1", 0), StoreID: "local", Table: "public.items", Schema: "abc123"}
}

// sampleParts is three destinations' rows, given out of name order; shopB
// has two batches.
func sampleParts(mem memory.Allocator) (parts []packstore.SegmentPart, release func()) {
	c := pt.Batch(mem, []pt.Row{{ID: 7, Tenant: "shopC", Op: proto.OpInsert, LSN: 50, Seq: 1}})
	a := pt.Batch(mem, []pt.Row{
		{ID: 1, Tenant: "shopA", Note: pt.Str("x"), Op: proto.OpInsert, LSN: 200, Seq: 3},
		{ID: 2, Tenant: "shopA", Op: proto.OpDelete, LSN: 100, Seq: 4},
	})
	b1 := pt.Batch(mem, []pt.Row{{ID: 3, Tenant: "shopB", Op: proto.OpUpdate, LSN: 300, Seq: 1, Unchanged: []string{"note"}}})
	b2 := pt.Batch(mem, []pt.Row{
		{ID: 4, Tenant: "shopB", Op: proto.OpMoveOut, LSN: 310, Seq: 2},
		{ID: 5, Tenant: "shopB", Op: proto.OpInsert, LSN: 305, Seq: 9},
	})
	parts = []packstore.SegmentPart{
		{Destination: "shopC", Recs: []arrow.RecordBatch{c}},
		{Destination: "shopA", Recs: []arrow.RecordBatch{a}},
		{Destination: "shopB", Recs: []arrow.RecordBatch{b1, b2}},
	}
	return parts, func() {
		for _, r := range []arrow.RecordBatch{a, b1, b2, c} {
			r.Release()
		}
	}
}

func TestEncodeDecodeSegment(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	parts, release := sampleParts(mem)
	defer release()
	sm := sampleSegmentMeta()
	data, entries, err := packstore.EncodeSegment(parts, sm)
	if err != nil {
		t.Fatal(err)
	}
	want := []proto.SegmentEntry{
		{Destination: "shopA", Lo: 0, Rows: 2, Tombstones: 1, First: "0/64:4", Last: "0/C8:3"},
		{Destination: "shopB", Lo: 2, Rows: 3, Tombstones: 1, First: "0/12C:1", Last: "0/136:2"},
		{Destination: "shopC", Lo: 5, Rows: 1, Tombstones: 0, First: "0/32:1", Last: "0/32:1"},
	}
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(entries)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("entries\n got %s\nwant %s", gotJSON, wantJSON)
	}
	meta, schema, err := packstore.VerifyPack(data, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !meta.IsSegment() || meta.Destination != "" || meta.Rows != 6 || meta.Tombstones != 2 ||
		meta.First != (proto.Position{LSN: 50, Seq: 1}) || meta.Last != (proto.Position{LSN: 310, Seq: 2}) ||
		meta.PackID != sm.PackID || meta.Table != sm.Table || meta.Schema != sm.Schema || meta.StoreID != sm.StoreID {
		t.Fatalf("meta %+v", meta)
	}
	if meta.Path() != sm.Path() || sm.Path() != ".seg/2026-12-02/00/public.items/"+sm.PackID+".arrow" {
		t.Fatalf("paths %q, %q", meta.Path(), sm.Path())
	}
	if err := packstore.ValidatePath(sm.Path()); err != nil {
		t.Fatal(err)
	}
	if f, _ := schema.Metadata().GetValue(proto.MetaPackFormat); f != proto.SegmentFormatVersion {
		t.Fatalf("format %q", f)
	}
	if last := schema.Field(schema.NumFields() - 1); last.Name != proto.ColDestination || !arrow.TypeEqual(last.Type, arrow.BinaryTypes.String) {
		t.Fatalf("last field %v", last)
	}
	got, err := meta.Entries()
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := json.Marshal(got); !bytes.Equal(g, wantJSON) {
		t.Fatalf("footer entries %s", g)
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
	if m2 != meta || len(recs) != 1 {
		t.Fatalf("decode %+v, %d batches, want the parts joined into one", m2, len(recs))
	}
	runs, col, err := proto.DestinationRuns(recs[0])
	if err != nil || col != int(recs[0].NumCols())-1 {
		t.Fatalf("runs %v, column %d: %v", runs, col, err)
	}
	if len(runs) != 3 || runs[0] != (proto.DestinationRun{Destination: "shopA", Lo: 0, Hi: 2}) ||
		runs[1] != (proto.DestinationRun{Destination: "shopB", Lo: 2, Hi: 5}) || runs[2] != (proto.DestinationRun{Destination: "shopC", Lo: 5, Hi: 6}) {
		t.Fatalf("runs %v", runs)
	}
	// Each part's batch is its rows in the file, the column dropped.
	for _, o := range []struct {
		rec    arrow.RecordBatch
		lo, hi int64
	}{{parts[1].Recs[0], 0, 2}, {parts[2].Recs[0], 2, 3}, {parts[2].Recs[1], 3, 5}, {parts[0].Recs[0], 5, 6}} {
		sl := recs[0].NewSlice(o.lo, o.hi)
		got := array.NewRecordBatch(o.rec.Schema(), sl.Columns()[:col], sl.NumRows())
		if !array.RecordEqual(got, o.rec) {
			t.Fatalf("rows [%d, %d) changed", o.lo, o.hi)
		}
		got.Release()
		sl.Release()
	}
	again, _, err := packstore.EncodeSegment(parts, sm)
	if err != nil || !bytes.Equal(again, data) {
		t.Fatalf("re-encoding differs (%v)", err)
	}
	// Large segments are compressed as large packs are.
	if len(data) > 64<<10 {
		t.Fatalf("small segment is %d bytes", len(data))
	}
}

// TestSegmentBatchesSplitEntries: a segment past the batch size is written
// as several batches, a destination's rows may span two of them, and the
// index is still checked row by row (a damaged entry across the boundary
// is refused).
func TestSegmentBatchesSplitEntries(t *testing.T) {
	defer packstore.SetSegmentBatchBytes(1)() // every row is a batch of its own
	parts, release := sampleParts(nil)
	defer release()
	data, entries, err := packstore.EncodeSegment(parts, sampleSegmentMeta())
	if err != nil {
		t.Fatal(err)
	}
	meta, recs, err := packstore.DecodePack(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	if len(recs) != 6 || !meta.IsSegment() || entries[1].Rows != 3 {
		t.Fatalf("%d batches, entries %v", len(recs), entries)
	}
	bad := rewriteSegment(t, data, editEntries(func(es []proto.SegmentEntry) []proto.SegmentEntry {
		es[1].Last, es[1].First = es[1].First, es[1].Last // shopB spans batches 1 and 2
		return es
	}), nil)
	if _, _, err := packstore.VerifyPack(bad, 0); !errors.Is(err, packstore.ErrCorruptPack) {
		t.Fatalf("entry spanning batches with swapped positions: %v", err)
	}
}

func TestEncodeSegmentRefuses(t *testing.T) {
	parts, release := sampleParts(nil)
	defer release()
	empty := pt.Batch(nil, nil)
	defer empty.Release()
	withDest := addColumn(t, parts[0].Recs[0], proto.ColDestination, "shopC")
	defer withDest.Release()
	sm := sampleSegmentMeta()
	badID := sm
	badID.PackID = "01900000-0000-7000-8000-000000000001"
	for name, c := range map[string]struct {
		parts []packstore.SegmentPart
		meta  packstore.SegmentMeta
	}{
		"no parts":       {nil, sm},
		"duplicate":      {[]packstore.SegmentPart{parts[0], parts[0]}, sm},
		"bad name":       {[]packstore.SegmentPart{{Destination: "a/b", Recs: parts[0].Recs}}, sm},
		"empty part":     {[]packstore.SegmentPart{{Destination: "a", Recs: []arrow.RecordBatch{empty}}}, sm},
		"has column":     {[]packstore.SegmentPart{{Destination: "shopC", Recs: []arrow.RecordBatch{withDest}}}, sm},
		"id has no time": {parts, badID},
	} {
		if _, _, err := packstore.EncodeSegment(c.parts, c.meta); !errors.Is(err, packstore.ErrBadPackMeta) {
			t.Errorf("%s: %v, want ErrBadPackMeta", name, err)
		}
	}
	// A pack cannot carry the segment column.
	m := sampleMeta()
	m.Destination = "shopC"
	if _, err := packstore.EncodePack([]arrow.RecordBatch{withDest}, m); !errors.Is(err, packstore.ErrBadPackMeta) {
		t.Errorf("pack with %s: %v", proto.ColDestination, err)
	}
}

// addColumn returns rec with a constant utf8 column appended.
func addColumn(t *testing.T, rec arrow.RecordBatch, name, value string) arrow.RecordBatch {
	t.Helper()
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	for i := 0; i < int(rec.NumRows()); i++ {
		b.Append(value)
	}
	col := b.NewArray()
	defer col.Release()
	fields := append(append([]arrow.Field{}, rec.Schema().Fields()...), arrow.Field{Name: name, Type: arrow.BinaryTypes.String})
	md := rec.Schema().Metadata()
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), append(append([]arrow.Array{}, rec.Columns()...), col), rec.NumRows())
}

// rewriteSegment re-encodes a valid segment's batches with edit applied to
// its footer metadata and rows: a well-formed file whose segment content
// is damaged, which the byte-level damage tests cannot make.
func rewriteSegment(t *testing.T, data []byte, editMeta func(md map[string]string), editRec func(i int, rec arrow.RecordBatch) arrow.RecordBatch) []byte {
	t.Helper()
	rd, err := ipc.NewFileReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	sc := rd.Schema()
	m := map[string]string{}
	for i, k := range sc.Metadata().Keys() {
		m[k] = sc.Metadata().Values()[i]
	}
	// Without the checksum: the file reads as one written before checksums,
	// so the cases reach the structural checks (with it, the checksum alone
	// would refuse every edit: TestChecksumRefusesFlippedValue).
	delete(m, proto.MetaPackChecksum)
	if editMeta != nil {
		editMeta(m)
	}
	var keys, vals []string
	for _, k := range sc.Metadata().Keys() {
		if v, ok := m[k]; ok {
			keys, vals = append(keys, k), append(vals, v)
		}
	}
	md := arrow.NewMetadata(keys, vals)
	schema := arrow.NewSchema(sc.Fields(), &md)
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < rd.NumRecords(); i++ {
		rec, err := rd.RecordBatchAt(i)
		if err != nil {
			t.Fatal(err)
		}
		out := array.NewRecordBatch(schema, rec.Columns(), rec.NumRows())
		if editRec != nil {
			out = editRec(i, out)
		}
		if err := w.Write(out); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func editEntries(edit func(es []proto.SegmentEntry) []proto.SegmentEntry) func(md map[string]string) {
	return func(md map[string]string) {
		var es []proto.SegmentEntry
		_ = json.Unmarshal([]byte(md[proto.MetaPackDestinations]), &es)
		b, _ := json.Marshal(edit(es))
		md[proto.MetaPackDestinations] = string(b)
	}
}

// TestVerifySegmentRefusesDamage: a segment whose footer index disagrees
// with its rows, or whose rows name the wrong destination, is corrupt
// (ErrCorruptPack: the indexer dead-letters it as a corrupt pack).
func TestVerifySegmentRefusesDamage(t *testing.T) {
	parts, release := sampleParts(nil)
	defer release()
	data, _, err := packstore.EncodeSegment(parts, sampleSegmentMeta())
	if err != nil {
		t.Fatal(err)
	}
	// Negative control: the rewrite itself keeps a segment valid.
	if _, _, err := packstore.VerifyPack(rewriteSegment(t, data, nil, nil), 0); err != nil {
		t.Fatalf("unedited rewrite: %v", err)
	}
	// Row 2, shopB's first, names shopA.
	swapDest := func(_ int, rec arrow.RecordBatch) arrow.RecordBatch {
		col := rec.Schema().NumFields() - 1
		old := rec.Column(col).(*array.String)
		b := array.NewStringBuilder(memory.DefaultAllocator)
		for i := 0; i < old.Len(); i++ {
			v := old.Value(i)
			if i == 2 {
				v = "shopA"
			}
			b.Append(v)
		}
		cols := append([]arrow.Array{}, rec.Columns()...)
		cols[col] = b.NewArray()
		return array.NewRecordBatch(rec.Schema(), cols, rec.NumRows())
	}
	cases := map[string][]byte{
		"gap between entries": rewriteSegment(t, data, editEntries(func(es []proto.SegmentEntry) []proto.SegmentEntry {
			es[1].Lo++
			return es
		}), nil),
		"entry rows shifted": rewriteSegment(t, data, editEntries(func(es []proto.SegmentEntry) []proto.SegmentEntry {
			es[0].Rows++
			es[1].Lo++
			es[1].Rows--
			return es
		}), nil),
		"entry tombstones": rewriteSegment(t, data, editEntries(func(es []proto.SegmentEntry) []proto.SegmentEntry {
			es[0].Tombstones, es[1].Tombstones = 0, 2
			return es
		}), nil),
		"entry first": rewriteSegment(t, data, editEntries(func(es []proto.SegmentEntry) []proto.SegmentEntry {
			es[1].First = "0/12D:1"
			return es
		}), nil),
		"entry last": rewriteSegment(t, data, editEntries(func(es []proto.SegmentEntry) []proto.SegmentEntry {
			es[2].Last = "0/33:1"
			return es
		}), nil),
		"unsorted": rewriteSegment(t, data, editEntries(func(es []proto.SegmentEntry) []proto.SegmentEntry {
			es[0].Destination, es[1].Destination = es[1].Destination, es[0].Destination
			return es
		}), nil),
		"bad name": rewriteSegment(t, data, editEntries(func(es []proto.SegmentEntry) []proto.SegmentEntry {
			es[2].Destination = "shop/C"
			return es
		}), nil),
		"missing entry": rewriteSegment(t, data, editEntries(func(es []proto.SegmentEntry) []proto.SegmentEntry {
			return es[:2]
		}), nil),
		"no index": rewriteSegment(t, data, func(md map[string]string) { delete(md, proto.MetaPackDestinations) }, nil),
		"index on a pack": rewriteSegment(t, data, func(md map[string]string) {
			md[proto.MetaPackFormat] = proto.PackFormatVersion
			md[proto.MetaPackDestination] = "shopA"
		}, nil),
		"named destination":          rewriteSegment(t, data, func(md map[string]string) { md[proto.MetaPackDestination] = "shopA" }, nil),
		"row of another destination": rewriteSegment(t, data, nil, swapDest),
	}
	for name, bad := range cases {
		if _, _, err := packstore.VerifyPack(bad, 0); !errors.Is(err, packstore.ErrCorruptPack) {
			t.Errorf("%s: VerifyPack: %v, want ErrCorruptPack", name, err)
		}
		if _, recs, err := packstore.DecodePack(bad, nil); !errors.Is(err, packstore.ErrCorruptPack) || recs != nil {
			t.Errorf("%s: DecodePack: %v", name, err)
		}
	}
	// Byte damage in a segment's body is caught as in a pack's, by the
	// checksum and, without it, by the structure.
	for _, d := range [][]byte{data, pt.Unchecksummed(data)} {
		if _, _, err := packstore.VerifyPack(pt.DamageBody(d, 3), 0); !errors.Is(err, packstore.ErrCorruptPack) {
			t.Errorf("body damage: %v", err)
		}
	}
}

func TestValidateSegmentPath(t *testing.T) {
	id := proto.SegmentID(segTime, "w1", 3)
	good, _ := proto.SegmentPath(id, "public.items")
	if err := packstore.ValidatePath(good); err != nil {
		t.Fatalf("%s: %v", good, err)
	}
	for _, bad := range []string{
		".seg/2026-12-02/01/public.items/" + id + ".arrow", // wrong hour
		".seg/2026-12-02/00/items/" + id + ".arrow",        // table without schema
		".seg/2026-12-02/00/public.items/" + id,            // no .arrow
		".seg/2026-12-02/00/public.items/x-w1-0.arrow",     // id without time
		".seg/2026-12-02/00/public.items/a/" + id + ".arrow",
		".seg/2026-12-02/00/public.items/.tmp-" + id + ".arrow",
		".segx/public.items/" + id + ".arrow",
	} {
		if err := packstore.ValidatePath(bad); !errors.Is(err, packstore.ErrBadPath) {
			t.Errorf("%s: %v, want ErrBadPath", bad, err)
		}
	}
	if !strings.HasPrefix(good, proto.SegmentsDir+"/") || !packstore.IsSegmentPath(good) {
		t.Fatal(good)
	}
}

// TestEncodeSegmentBatchRefusesRanges: ranges must name the batch's rows
// exactly, in name order, each destination once with rows.
func TestEncodeSegmentBatchRefusesRanges(t *testing.T) {
	rec := pt.Batch(nil, []pt.Row{{ID: 1, LSN: 1, Seq: 1}, {ID: 2, LSN: 2, Seq: 1}, {ID: 3, LSN: 3, Seq: 1}})
	defer rec.Release()
	sm := sampleSegmentMeta()
	if _, entries, err := packstore.EncodeSegmentBatch(rec, []packstore.SegmentRange{{"a", 1}, {"b", 2}}, sm); err != nil || len(entries) != 2 || entries[1].Lo != 1 || entries[1].First != "0/2:1" {
		t.Fatalf("good ranges: %v %v", entries, err)
	}
	for name, rs := range map[string][]packstore.SegmentRange{
		"none":         nil,
		"out of order": {{"b", 1}, {"a", 2}},
		"duplicate":    {{"a", 1}, {"a", 2}},
		"no rows":      {{"a", 0}, {"b", 3}},
		"too few":      {{"a", 1}, {"b", 1}},
		"too many":     {{"a", 2}, {"b", 2}},
		"bad name":     {{"a/b", 3}},
	} {
		if _, _, err := packstore.EncodeSegmentBatch(rec, rs, sm); !errors.Is(err, packstore.ErrBadPackMeta) {
			t.Errorf("%s: %v, want ErrBadPackMeta", name, err)
		}
	}
}
