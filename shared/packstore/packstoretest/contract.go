package packstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// StoreContract runs the behaviour every packstore.Store must have against
// fresh stores made by newStore.
func StoreContract(t *testing.T, newStore func(t *testing.T) packstore.Store) {
	ctx := context.Background()

	t.Run("ID", func(t *testing.T) {
		if newStore(t).ID() == "" {
			t.Fatal("empty store id")
		}
	})

	t.Run("PutGetRoundTrip", func(t *testing.T) {
		s := newStore(t)
		p := proto.PackPath("shop1", "public.items", "p1")
		data := []byte("pack bytes \x00\x01")
		if err := s.Put(ctx, p, data); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("got %q, want %q", got, data)
		}
	})

	t.Run("PutSameBytesIsIdempotent", func(t *testing.T) {
		s := newStore(t)
		p := proto.PackPath("shop1", "public.items", "p1")
		for i := 0; i < 3; i++ {
			if err := s.Put(ctx, p, []byte("same")); err != nil {
				t.Fatalf("put %d: %v", i, err)
			}
		}
	})

	t.Run("PutDifferentBytesRefused", func(t *testing.T) {
		s := newStore(t)
		p := proto.PackPath("shop1", "public.items", "p1")
		if err := s.Put(ctx, p, []byte("first")); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, p, []byte("second")); !errors.Is(err, packstore.ErrImmutable) {
			t.Fatalf("overwrite: got %v, want ErrImmutable", err)
		}
		got, _ := s.Get(ctx, p)
		if string(got) != "first" {
			t.Fatalf("pack changed to %q", got)
		}
	})

	t.Run("ConcurrentWritersOneWins", func(t *testing.T) {
		s := newStore(t)
		p := proto.PackPath("shop1", "public.items", "race")
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.Put(ctx, p, []byte(fmt.Sprintf("writer-%d", i)))
			}()
		}
		wg.Wait()
		winners := 0
		winner := ""
		for i, err := range errs {
			switch {
			case err == nil:
				winners++
				winner = fmt.Sprintf("writer-%d", i)
			case errors.Is(err, packstore.ErrImmutable):
			default:
				t.Fatalf("writer %d: %v", i, err)
			}
		}
		if winners != 1 {
			t.Fatalf("%d writers succeeded with different bytes, want exactly 1", winners)
		}
		got, err := s.Get(ctx, p)
		if err != nil || string(got) != winner {
			t.Fatalf("got %q (%v), want the winner's %q", got, err, winner)
		}
	})

	t.Run("DeleteRemovesAndRepeats", func(t *testing.T) {
		s := newStore(t)
		d, ok := s.(packstore.Deleter)
		if !ok {
			t.Skip("the store does not delete")
		}
		p := proto.PackPath("shop1", "public.items", "p1")
		keep := proto.PackPath("shop1", "public.items", "p2")
		for _, path := range []string{p, keep} {
			if err := s.Put(ctx, path, []byte("bytes")); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 2; i++ { // a repeated delete (a GC pass run again) is no error
			if err := d.Delete(ctx, p); err != nil {
				t.Fatalf("delete %d: %v", i, err)
			}
		}
		if _, err := s.Get(ctx, p); !errors.Is(err, packstore.ErrNotFound) {
			t.Fatalf("get after delete: got %v, want ErrNotFound", err)
		}
		if _, err := s.Get(ctx, keep); err != nil {
			t.Fatalf("the other pack: %v", err)
		}
		if err := d.Delete(ctx, "../escape"); !errors.Is(err, packstore.ErrBadPath) {
			t.Fatalf("bad path: got %v, want ErrBadPath", err)
		}
	})

	t.Run("GetMissing", func(t *testing.T) {
		s := newStore(t)
		_, err := s.Get(ctx, proto.PackPath("shop1", "public.items", "nope"))
		if !errors.Is(err, packstore.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
	})

	t.Run("BadPathsRefused", func(t *testing.T) {
		s := newStore(t)
		for _, p := range []string{
			"", "x", "shop1/public.items", "../shop1/public.items/p",
			"shop1/../public.items/p", "shop1/public.items/../p", "shop1/public.items/..",
			"/shop1/public.items/p", "shop 1/public.items/p", "shop1/Public.Items/p",
			"shop1/items/p", "shop1/public.items/.hidden", "shop1/public.items/a\\b",
			"shop1/public.items/", "shop1//public.items/p", "~zz!/public.items/p",
		} {
			if err := s.Put(ctx, p, []byte("x")); !errors.Is(err, packstore.ErrBadPath) {
				t.Errorf("Put(%q): got %v, want ErrBadPath", p, err)
			}
			if _, err := s.Get(ctx, p); !errors.Is(err, packstore.ErrBadPath) {
				t.Errorf("Get(%q): got %v, want ErrBadPath", p, err)
			}
		}
		if err := s.List(ctx, "../", func(string) error { return nil }); !errors.Is(err, packstore.ErrBadPath) {
			t.Errorf("List(../): got %v, want ErrBadPath", err)
		}
	})

	t.Run("ListLexicalAndPrefix", func(t *testing.T) {
		s := newStore(t)
		paths := []string{
			"b/public.items/p2.arrow", "a/public.items/p1.arrow", "a/public.items/p0.arrow",
			"a/public.orders/p9.arrow", "ab/public.items/p1.arrow", "a-b/public.items/p1.arrow",
			"~c4n64/public.items/x.arrow",
		}
		for _, p := range paths {
			if err := s.Put(ctx, p, []byte(p)); err != nil {
				t.Fatal(err)
			}
		}
		list := func(prefix string) []string {
			var out []string
			if err := s.List(ctx, prefix, func(p string) error { out = append(out, p); return nil }); err != nil {
				t.Fatalf("List(%q): %v", prefix, err)
			}
			return out
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"", []string{"a-b/public.items/p1.arrow", "a/public.items/p0.arrow", "a/public.items/p1.arrow", "a/public.orders/p9.arrow", "ab/public.items/p1.arrow", "b/public.items/p2.arrow", "~c4n64/public.items/x.arrow"}},
			{"a/", []string{"a/public.items/p0.arrow", "a/public.items/p1.arrow", "a/public.orders/p9.arrow"}},
			{"a", []string{"a-b/public.items/p1.arrow", "a/public.items/p0.arrow", "a/public.items/p1.arrow", "a/public.orders/p9.arrow", "ab/public.items/p1.arrow"}},
			{"a/public.items/", []string{"a/public.items/p0.arrow", "a/public.items/p1.arrow"}},
			{"a/public.items/p1", []string{"a/public.items/p1.arrow"}},
			{"zzz/", nil},
		} {
			if got := list(tc.prefix); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("List(%q)\n got %v\nwant %v", tc.prefix, got, tc.want)
			}
		}
		stop := errors.New("stop")
		n := 0
		err := s.List(ctx, "", func(string) error { n++; return stop })
		if !errors.Is(err, stop) || n != 1 {
			t.Fatalf("List with failing fn: err %v after %d calls, want stop after 1", err, n)
		}
	})

	t.Run("SegmentsListedApartAndAfter", func(t *testing.T) {
		s := newStore(t)
		t0 := time.Date(2026, 12, 2, 22, 0, 0, 0, time.UTC)
		var segs []string
		for i, d := range []time.Duration{0, time.Minute, 2 * time.Hour, 26 * time.Hour} {
			p, err := proto.SegmentPath(proto.SegmentID(t0.Add(d), "w1", uint64(i)), "public.items")
			if err != nil {
				t.Fatal(err)
			}
			segs = append(segs, p)
		}
		packs := []string{"a/public.items/p1.arrow", "b/public.items/p2.arrow"}
		for _, p := range append(append([]string{}, segs...), packs...) {
			if err := s.Put(ctx, p, []byte(p)); err != nil {
				t.Fatalf("put %s: %v", p, err)
			}
		}
		list := func(prefix, after string) []string {
			var out []string
			if err := packstore.ListAfter(ctx, s, prefix, after, func(p string) error { out = append(out, p); return nil }); err != nil {
				t.Fatalf("ListAfter(%q, %q): %v", prefix, after, err)
			}
			return out
		}
		for _, tc := range []struct {
			prefix, after string
			want          []string
		}{
			{"", "", packs}, // the per-destination layout never sees segments
			{proto.SegmentsDir + "/", "", segs},
			{proto.SegmentsDir + "/", proto.SegmentHourDir(t0), segs},
			{proto.SegmentsDir + "/", proto.SegmentHourDir(t0.Add(time.Hour)), segs[2:]},
			{proto.SegmentsDir + "/", segs[2], segs[3:]},
			{proto.SegmentsDir + "/", proto.SegmentHourDir(t0.Add(48 * time.Hour)), nil},
			{proto.SegmentHourDir(t0) + "/", "", segs[:2]},
			{"", "a/public.items/p1.arrow", packs[1:]},
		} {
			if got := list(tc.prefix, tc.after); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("ListAfter(%q, %q)\n got %v\nwant %v", tc.prefix, tc.after, got, tc.want)
			}
		}
	})

	t.Run("TableFunction", func(t *testing.T) {
		s := newStore(t)
		tf := s.TableFunction(proto.PackPath("shop1", "public.items", "p1"))
		if !strings.Contains(tf, "(") || !strings.Contains(tf, "p1.arrow") {
			t.Fatalf("TableFunction = %q", tf)
		}
	})

	t.Run("PackRoundTrip", func(t *testing.T) {
		s := newStore(t)
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		rec := Batch(mem, []Row{
			{ID: 1, Tenant: "shop1", Note: Str("a"), Op: proto.OpInsert, LSN: 100, Seq: 1},
			{ID: 2, Tenant: "shop1", Op: proto.OpDelete, LSN: 100, Seq: 2},
		})
		defer rec.Release()
		meta := packstore.PackMeta{PackID: "0190-test", StoreID: s.ID(), Destination: "shop1", Table: "public.items", Schema: "fp"}
		data, err := packstore.EncodePack([]arrow.RecordBatch{rec}, meta)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, meta.Path(), data); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, meta.Path())
		if err != nil {
			t.Fatal(err)
		}
		m, recs, err := packstore.DecodePack(got, mem)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			r.Release()
		}
		if m.Rows != 2 || m.Tombstones != 1 || m.StoreID != s.ID() || m.Last != (proto.Position{LSN: 100, Seq: 2}) {
			t.Fatalf("meta %+v", m)
		}
	})
}
