package packstoretest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// ClaimContract runs the behaviour every packstore.ClaimCollector must
// have (the reader's PutClaim, the flusher's GetClaim, the claim garbage
// collection's ListClaims and DeleteClaim) against fresh stores made by
// newStore.
func ClaimContract(t *testing.T, newStore func(t *testing.T) packstore.ClaimCollector) {
	ctx := context.Background()
	a := proto.ClaimPath("public.docs", proto.Position{LSN: 0x1234, Seq: 2}, "body")
	b := proto.ClaimPath("public.docs", proto.Position{LSN: 0x1234, Seq: 2}, "title")
	c := proto.ClaimPath("public.notes", proto.Position{LSN: 0x99, Seq: 1}, "text")

	t.Run("PutGetRewrite", func(t *testing.T) {
		s := newStore(t)
		if err := s.PutClaim(ctx, a, []byte("first")); err != nil {
			t.Fatal(err)
		}
		// A replayed change writes its claim again: allowed, unlike a pack.
		if err := s.PutClaim(ctx, a, []byte("value of a replay")); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetClaim(ctx, a)
		if err != nil || !bytes.Equal(got, []byte("value of a replay")) {
			t.Fatalf("GetClaim: %q, %v", got, err)
		}
		if _, err := s.GetClaim(ctx, b); !errors.Is(err, packstore.ErrNotFound) {
			t.Fatalf("missing claim: %v, want ErrNotFound", err)
		}
		for _, bad := range []string{"shop1/public.docs/x.arrow", ".claims/nodot/x/y", ".claims/public.docs/../x/y"} {
			if err := s.PutClaim(ctx, bad, []byte("x")); !errors.Is(err, packstore.ErrBadPath) {
				t.Fatalf("PutClaim %q: %v, want ErrBadPath", bad, err)
			}
		}
	})

	t.Run("ListAndDelete", func(t *testing.T) {
		s := newStore(t)
		before := time.Now().Add(-time.Minute)
		for _, p := range []string{c, b, a} {
			if err := s.PutClaim(ctx, p, []byte("v:"+p)); err != nil {
				t.Fatal(err)
			}
		}
		list := func() []packstore.ClaimInfo {
			var out []packstore.ClaimInfo
			if err := s.ListClaims(ctx, func(ci packstore.ClaimInfo) error { out = append(out, ci); return nil }); err != nil {
				t.Fatal(err)
			}
			return out
		}
		got := list()
		if len(got) != 3 || got[0].Path != a || got[1].Path != b || got[2].Path != c {
			t.Fatalf("ListClaims: %+v, want %s, %s, %s in order", got, a, b, c)
		}
		for _, ci := range got {
			if ci.Modified.Before(before) || ci.Modified.After(time.Now().Add(time.Minute)) || ci.Size != int64(len("v:"+ci.Path)) {
				t.Fatalf("claim %s: modified %s, size %d", ci.Path, ci.Modified, ci.Size)
			}
		}
		if err := s.DeleteClaim(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteClaim(ctx, a); err != nil {
			t.Fatalf("deleting a deleted claim: %v", err)
		}
		if _, err := s.GetClaim(ctx, a); !errors.Is(err, packstore.ErrNotFound) {
			t.Fatalf("deleted claim: %v, want ErrNotFound", err)
		}
		// The other column's claim at the same position stays.
		if v, err := s.GetClaim(ctx, b); err != nil || string(v) != "v:"+b {
			t.Fatalf("claim beside the deleted one: %q, %v", v, err)
		}
		if got := list(); len(got) != 2 || got[0].Path != b || got[1].Path != c {
			t.Fatalf("after the delete: %+v", got)
		}
		if err := s.DeleteClaim(ctx, "shop1/public.docs/p1.arrow"); !errors.Is(err, packstore.ErrBadPath) {
			t.Fatalf("DeleteClaim of a pack path: %v, want ErrBadPath", err)
		}
	})

	t.Run("ListSkipsPacks", func(t *testing.T) {
		s := newStore(t)
		if st, ok := s.(packstore.Store); ok {
			if err := st.Put(ctx, proto.PackPath("shop1", "public.docs", "p1"), []byte("pack")); err != nil {
				t.Fatal(err)
			}
		}
		n := 0
		if err := s.ListClaims(ctx, func(packstore.ClaimInfo) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("ListClaims lists %d objects in a store without claims", n)
		}
	})
}
