package indexer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/indexer"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// announceSegment publishes the PACKS event the flusher publishes for a
// segment: one row per destination, in the segment's row order, on the
// table's subject. edit may change the rows' destinations (a damaged
// event).
func (h *harness) announceSegment(t *testing.T, m packstore.PackMeta, edit func(dests []string)) {
	t.Helper()
	entries, err := m.Entries()
	if err != nil {
		t.Fatal(err)
	}
	dests := make([]string, len(entries))
	for i, e := range entries {
		dests[i] = e.Destination
	}
	if edit != nil {
		edit(dests)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, proto.PackEventSchema)
	for i, e := range entries {
		for j, v := range []string{m.PackID, m.StoreID, dests[i], m.Table, m.Path(), m.Schema, e.First, e.Last} {
			b.Field(j).(*array.StringBuilder).Append(v)
		}
		b.Field(8).(*array.Int64Builder).Append(e.Rows)
		b.Field(9).(*array.Int64Builder).Append(e.Tombstones)
		b.Field(10).(*array.Int64Builder).Append(0)
	}
	rec := b.NewRecordBatch()
	b.Release()
	body, err := arrowcodec.Encode(rec)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	hdr := nats.Header{}
	hdr.Set(proto.HeaderWire, proto.WireVersion)
	hdr.Set(proto.HeaderMsgID, proto.PackMsgID(m.PackID))
	if _, err := h.js.PublishMsg(t.Context(), &nats.Msg{Subject: proto.SegmentEventSubject(m.Table), Header: hdr, Data: body}); err != nil {
		t.Fatal(err)
	}
}

func segmentParts(dests ...string) []catalogtest.Part {
	var parts []catalogtest.Part
	for i, d := range dests {
		parts = append(parts, catalogtest.Part{Destination: d, Rows: rowsOf(d, 0, 3+i)})
	}
	return parts
}

// inventory counts the inventory rows of pack ids, each (pack,
// destination) once (the inventory keeps a copy indexed twice).
func inventory(t *testing.T, cat *catalog.Catalog, ids ...string) int {
	t.Helper()
	q := "SELECT count(DISTINCT store_id, pack_id, destination) FROM " + cat.Prefix() + "_packs WHERE pack_id IN ('" + strings.Join(ids, "', '") + "')"
	res, err := cat.Conn().Query(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	return int(res.Rows[0][0].(uint64))
}

// TestSegmentEventIndexed: a segment's event (one row per destination on
// the table's subject) has the segment indexed, one inventory row per
// destination, and acked; an event whose destinations disagree with the
// segment's footer (tenant isolation) and a segment with a damaged body
// are dead-lettered and stay out of the inventory, while the sound one
// beside them (negative control) is indexed.
func TestSegmentEventIndexed(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ix, err := indexer.New(h.cfg, indexer.Deps{JS: h.js, Catalog: h.conn, Packs: h.store})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Catalog().EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx) }()
	now := time.Now()
	good := catalogtest.WriteSegment(t, h.store, catalogtest.Items, proto.SegmentID(now, "w1", 0), segmentParts("shop1", "shop2", "shop3"))
	lying := catalogtest.WriteSegment(t, h.store, catalogtest.Items, proto.SegmentID(now, "w1", 1), segmentParts("shop4", "shop5"))
	data, damaged := catalogtest.EncodeSegment(t, catalogtest.Items, "local", proto.SegmentID(now, "w1", 2), segmentParts("shop7", "shop8"))
	if err := h.store.Put(ctx, damaged.Path(), pt.DamageBody(data, 16)); err != nil {
		t.Fatal(err)
	}
	h.announceSegment(t, good, nil)
	h.announceSegment(t, lying, func(d []string) { d[1] = "shop6" })
	h.announceSegment(t, damaged, nil)
	cat := ix.Catalog()
	eventually(t, 30*time.Second, "the segment indexed", func() (bool, string) {
		n := inventory(t, cat, good.PackID)
		return n == 3, fmt.Sprintf("%d inventory rows; status %+v", n, ix.Status())
	})
	eventually(t, 30*time.Second, "the lying and the damaged segments dead-lettered", func() (bool, string) {
		n := len(h.deadLetters(t))
		return n == 2, fmt.Sprintf("%d dead letters", n)
	})
	reasons := map[string]string{}
	for _, dl := range h.deadLetters(t) {
		if got := dl.Header.Get(proto.HeaderOrigSubject); got != proto.SegmentEventSubject(catalogtest.Items.Name) {
			t.Fatalf("dead letter of %s", got)
		}
		r := dl.Header.Get(proto.HeaderReason)
		switch {
		case strings.Contains(r, catalog.ErrPackMismatch.Error()):
			reasons["mismatch"] = r
		case strings.Contains(r, packstore.ErrCorruptPack.Error()) && strings.Contains(r, damaged.Path()):
			reasons["corrupt"] = r
			checkHaltHeaders(t, dl.Header, damaged)
		}
	}
	if len(reasons) != 2 {
		t.Fatalf("dead letter reasons %v, want a mismatch and a corrupt segment", reasons)
	}
	if n := inventory(t, cat, lying.PackID, damaged.PackID); n != 0 {
		t.Fatalf("the lying and damaged segments have %d inventory rows", n)
	}
	h.waitSettled(t, 3)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// countingStore is the real directory store, counting the paths its
// listings hand out (instrumentation, not a fake).
type countingStore struct {
	*packstore.DirStore
	listed atomic.Int64
}

func (s *countingStore) List(ctx context.Context, prefix string, fn func(string) error) error {
	return s.ListAfter(ctx, prefix, "", fn)
}

func (s *countingStore) ListAfter(ctx context.Context, prefix, after string, fn func(string) error) error {
	return s.DirStore.ListAfter(ctx, prefix, after, func(p string) error {
		s.listed.Add(1)
		return fn(p)
	})
}

// TestReconcileListsSegmentsIncrementally: the reconciler lists the
// per-destination layout at its first pass only and segments from the hour
// before the newest one it listed, so a later pass lists the new hours,
// not the store; a segment with no event is still indexed at its second
// pass (found missing twice), a per-destination pack found missing at the
// first pass is indexed at the second by its path, and stale temporary
// files under the segments are removed.
func TestReconcileListsSegmentsIncrementally(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	store := &countingStore{DirStore: h.store}
	ix, err := indexer.New(h.cfg, indexer.Deps{JS: h.js, Catalog: h.conn, Packs: store})
	if err != nil {
		t.Fatal(err)
	}
	cat := ix.Catalog()
	if err := cat.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	// Hours in the past of the test's clock (the reconciler never starts
	// past its own clock), each segment at half past.
	t0 := time.Now().UTC().Add(-12 * time.Hour).Truncate(time.Hour).Add(30 * time.Minute)
	var old []string
	for hour := range 6 { // six old hours, two segments each, all indexed
		for n := range 2 {
			m := catalogtest.WriteSegment(t, store, catalogtest.Items, proto.SegmentID(t0.Add(time.Duration(hour)*time.Hour), "w1", uint64(n)), segmentParts("shop1", "shop2"))
			ref, err := catalog.ReadRef(ctx, store, m.Path())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cat.Index(ctx, store, []catalog.PackRef{ref}); err != nil {
				t.Fatal(err)
			}
			old = append(old, m.PackID)
		}
	}
	orphanPack := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p-orphan", rowsOf("shop1", 0, 2))
	// A stale temporary file of a killed segment write.
	tmpDir := filepath.Join(h.store.Root(), filepath.FromSlash(proto.SegmentHourDir(t0)), catalogtest.Items.Name)
	stale := filepath.Join(tmpDir, ".tmp-0000000000000000")
	if err := os.WriteFile(stale, []byte("half a segment"), 0o644); err != nil {
		t.Fatal(err)
	}
	oldTime := time.Now().Add(-2 * packstore.TempMaxAge)
	if err := os.Chtimes(stale, oldTime, oldTime); err != nil {
		t.Fatal(err)
	}
	if n, err := store.CleanTemp(ctx, 0); err != nil || n != 1 {
		t.Fatalf("CleanTemp removed %d (%v), want the stale file under %s", n, err, proto.SegmentsDir)
	}

	pass := func(wantIndexed int) int64 {
		t.Helper()
		store.listed.Store(0)
		n, err := ix.Reconcile(ctx)
		if err != nil || n != wantIndexed {
			t.Fatalf("pass indexed %d (%v), want %d", n, err, wantIndexed)
		}
		return store.listed.Load()
	}
	if got := pass(0); got != 13 { // 12 segments and the pack
		t.Fatalf("first pass listed %d paths, want 13 (the whole store)", got)
	}
	// Two new hours, the last one's segment without an event.
	last := t0.Add(5 * time.Hour)
	n1 := catalogtest.WriteSegment(t, store, catalogtest.Items, proto.SegmentID(last.Add(time.Hour), "w1", 0), segmentParts("shop1"))
	orphan := catalogtest.WriteSegment(t, store, catalogtest.Items, proto.SegmentID(last.Add(2*time.Hour), "w1", 0), segmentParts("shop2", "shop3"))
	ref, err := catalog.ReadRef(ctx, store, n1.Path())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Index(ctx, store, []catalog.PackRef{ref}); err != nil {
		t.Fatal(err)
	}
	// The hour before the newest listed (t0+4h), that hour, and the two new.
	if got := pass(1); got != 6 {
		t.Fatalf("second pass listed %d paths, want 6 (the last two listed hours and the new ones)", got)
	}
	if n := inventory(t, cat, orphanPack.PackID); n != 1 {
		t.Fatalf("the orphan pack has %d inventory rows after the second pass", n)
	}
	if got := pass(1); got != 2 {
		t.Fatalf("third pass listed %d paths, want 2 (the hour before the newest, and the newest)", got)
	}
	if n := inventory(t, cat, orphan.PackID); n != 2 {
		t.Fatalf("the segment without an event has %d inventory rows, want 2", n)
	}
	if got := pass(0); got != 2 {
		t.Fatalf("fourth pass listed %d paths, want 2", got)
	}
	if n := inventory(t, cat, old...); n != 24 {
		t.Fatalf("old segments have %d inventory rows, want 24", n)
	}
	// A writer whose clock runs three hours ahead does not move the next
	// start past the others' segments: a segment cut ten minutes ago and
	// written after the pass that listed the future one is listed.
	future := catalogtest.WriteSegment(t, store, catalogtest.Items, proto.SegmentID(time.Now().Add(3*time.Hour), "w9", 0), segmentParts("shop1"))
	if got := pass(0); got != 3 {
		t.Fatalf("fifth pass listed %d paths, want 3", got)
	}
	recent := catalogtest.WriteSegment(t, store, catalogtest.Items, proto.SegmentID(time.Now().Add(-10*time.Minute), "w1", 0), segmentParts("shop1"))
	if got := pass(1); got != 2 {
		t.Fatalf("sixth pass listed %d paths, want 2 (the recent segment and the future one)", got)
	}
	if got := pass(1); got != 2 {
		t.Fatalf("seventh pass listed %d paths, want 2", got)
	}
	if n := inventory(t, cat, future.PackID, recent.PackID); n != 2 {
		t.Fatalf("the future and recent segments have %d inventory rows, want 2", n)
	}
}

// checkHaltHeaders: the dead letter of m's event says what a halt of its
// destinations needs (docs/adr/0034-corrupt-pack-halts.md): table, path,
// the lowest first and highest last position, how many destinations and
// the hash of their names (the names are in its body, the event); the
// headers do not grow with the destinations.
func checkHaltHeaders(t *testing.T, h nats.Header, m packstore.PackMeta) {
	t.Helper()
	entries, err := m.Entries()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var first, last proto.Position
	for i, e := range entries {
		names = append(names, e.Destination)
		f, _ := proto.ParsePosition(e.First)
		l, _ := proto.ParsePosition(e.Last)
		if i == 0 || f.Less(first) {
			first = f
		}
		if i == 0 || last.Less(l) {
			last = l
		}
	}
	want := map[string]string{
		proto.HeaderTable: m.Table, proto.HeaderPackPath: m.Path(),
		proto.HeaderFirst: first.String(), proto.HeaderLast: last.String(),
		proto.HeaderHaltDestinations:     fmt.Sprint(len(names)),
		proto.HeaderHaltDestinationsHash: proto.DestinationsHash(names),
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("dead letter header %s = %q, want %q", k, got, v)
		}
	}
}
