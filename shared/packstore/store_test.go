package packstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sluice-cdc/sluice/proto"
)

// The contract suite itself lives in packstoretest, which imports this
// package; it runs against DirStore from packstoretest's own tests
// (dirstore_test.go there). Here: DirStore specifics.

func TestPutLeavesNoTempFiles(t *testing.T) {
	s, err := OpenDir(t.TempDir(), "t")
	if err != nil {
		t.Fatal(err)
	}
	p := proto.PackPath("shop1", "public.items", "p1.arrow")
	if err := s.Put(context.Background(), p, []byte("x")); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Dir(filepath.Join(s.Root(), p)))
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only the pack", len(ents))
	}
}

// Negative control for the no-clobber rule: with link(2) switched off (plain
// rename), racing writers of different bytes overwrite each other and more
// than one reports success.
func TestNegativeControlRenameClobbers(t *testing.T) {
	s, err := OpenDir(t.TempDir(), "t")
	if err != nil {
		t.Fatal(err)
	}
	s.noLink = true
	ctx := context.Background()
	clobbered := false
	for round := 0; round < 50 && !clobbered; round++ {
		p := proto.PackPath("shop1", "public.items", fmt.Sprintf("r%d", round))
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.Put(ctx, p, []byte(fmt.Sprintf("w%d", i))); err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				} else if !errors.Is(err, ErrImmutable) {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		clobbered = ok > 1
	}
	if !clobbered {
		t.Fatal("negative control: rename never let two different writers both succeed; the contract test would not notice a clobbering store")
	}
}

func TestTableFunctionQuotes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), `it's a \dir`)
	s, err := OpenDir(dir, "t")
	if err != nil {
		t.Fatal(err)
	}
	got := s.TableFunction("shop1/public.items/p1.arrow")
	want := `file('` + filepath.Dir(dir) + `/it\'s a \\dir/shop1/public.items/p1.arrow', 'Arrow')`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestOpenDirStoreID(t *testing.T) {
	if _, err := OpenDir(t.TempDir(), "bad id"); err == nil {
		t.Fatal("bad store id accepted")
	}
	s, err := OpenDir(t.TempDir(), "")
	if err != nil || s.ID() != "local" {
		t.Fatalf("default id: %v %v", s, err)
	}
}
