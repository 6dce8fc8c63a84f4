package packstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
)

// TestCleanTempRemovesOnlyStaleTempFiles: the temporary files killed
// writes left (named as Put names them, older than TempMaxAge) are removed
// from every table directory; a younger one (a write that may be under
// way), the packs, and other dot files stay. The files are real; only
// their age is set, since a write killed an hour ago cannot be waited for.
func TestCleanTempRemovesOnlyStaleTempFiles(t *testing.T) {
	ctx := context.Background()
	s, err := OpenDir(t.TempDir(), "t")
	if err != nil {
		t.Fatal(err)
	}
	var packs []string
	for _, d := range []string{"shop1", "shop2"} {
		p := proto.PackPath(d, "public.items", "p1")
		if err := s.Put(ctx, p, []byte("pack "+d)); err != nil {
			t.Fatal(err)
		}
		packs = append(packs, filepath.Join(s.Root(), p))
	}
	dir1, dir2 := filepath.Join(s.Root(), "shop1", "public.items"), filepath.Join(s.Root(), "shop2", "public.items")
	old := time.Now().Add(-TempMaxAge - time.Minute)
	file := func(path string, stale bool) string {
		if err := os.WriteFile(path, []byte("half a pack"), 0o644); err != nil {
			t.Fatal(err)
		}
		if stale {
			if err := os.Chtimes(path, old, old); err != nil {
				t.Fatal(err)
			}
		}
		return path
	}
	claimDir := filepath.Join(s.Root(), filepath.FromSlash(filepath.Dir(proto.ClaimPath("public.items", proto.Position{LSN: 7, Seq: 1}, "big"))))
	if err := os.MkdirAll(claimDir, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := []string{
		file(filepath.Join(dir1, tempPrefix+"00aa"), true),
		file(filepath.Join(dir2, tempPrefix+"00bb"), true),
		file(filepath.Join(claimDir, tempPrefix+"00dd"), true), // a killed claim-check write
	}
	keep := append(packs,
		file(filepath.Join(dir1, tempPrefix+"00cc"), false), // a write under way
		file(filepath.Join(dir1, ".keep"), true),            // not a temporary file
	)
	n, err := s.CleanTemp(ctx, 0)
	if err != nil || n != len(stale) {
		t.Fatalf("removed %d (%v), want %d", n, err, len(stale))
	}
	for _, p := range stale {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still there (%v)", p, err)
		}
	}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s removed: %v", p, err)
		}
	}
	if n, err := s.CleanTemp(ctx, 0); err != nil || n != 0 {
		t.Fatalf("second pass removed %d (%v)", n, err)
	}
}
