package packstore

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/secret"
)

// TestDirStoreModes: every tenant's rows are the owner's alone: a pack
// written by Put or PutMany (claims included) is 0600 and every directory
// of the store 0700, and an existing root left 0755 is narrowed to 0700.
func TestDirStoreModes(t *testing.T) {
	root := filepath.Join(t.TempDir(), "packs")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(root, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Put(ctx, "t1/public.orders/a/b.arrow", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for i, err := range d.PutMany(ctx, []PutItem{{Path: "t2/public.orders/c/d.arrow", Data: []byte("y")}}) {
		if err != nil {
			t.Fatalf("PutMany %d: %v", i, err)
		}
	}
	if err := d.PutClaim(ctx, proto.ClaimsDir+"/public.orders/e1", []byte("z")); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		want := secret.FileMode
		if e.IsDir() {
			want = secret.DirMode
		} else {
			n++
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("walked %d files: %v", n, err)
	}
}
