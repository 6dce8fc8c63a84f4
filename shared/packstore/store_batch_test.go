package packstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sluice-cdc/sluice/proto"
)

func TestPutManyMixedBatch(t *testing.T) {
	s, err := OpenDir(t.TempDir(), "t")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	existing := proto.PackPath("shop1", "public.items", "old.arrow")
	if err := s.Put(ctx, existing, []byte("old")); err != nil {
		t.Fatal(err)
	}
	var items []PutItem
	for i := 0; i < 40; i++ {
		items = append(items, PutItem{proto.PackPath(fmt.Sprintf("shop%d", i), "public.items", "p.arrow"), []byte(fmt.Sprint("data", i))})
	}
	items = append(items,
		PutItem{existing, []byte("old")},                                             // idempotent
		PutItem{existing, []byte("new")},                                             // immutable
		PutItem{"../x/public.items/p.arrow", nil},                                    // bad path
		PutItem{proto.PackPath("shop1", "public.items", "p.arrow"), []byte("data1")}, // same path twice, same bytes
	)
	errs := s.PutMany(ctx, items)
	for i, it := range items {
		switch {
		case i == 41:
			if !errors.Is(errs[i], ErrImmutable) {
				t.Errorf("item %d: %v, want ErrImmutable", i, errs[i])
			}
		case i == 42:
			if !errors.Is(errs[i], ErrBadPath) {
				t.Errorf("item %d: %v, want ErrBadPath", i, errs[i])
			}
		default:
			if errs[i] != nil {
				t.Errorf("item %d: %v", i, errs[i])
				continue
			}
			got, err := s.Get(ctx, it.Path)
			if err != nil || (i != 41 && i <= 40 && !bytes.Equal(got, it.Data)) {
				t.Errorf("item %d: read %q %v", i, got, err)
			}
		}
	}
	// No temp file is left anywhere.
	_ = filepath.WalkDir(s.Root(), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(p)[0] == '.' {
			t.Errorf("temp file left: %s", p)
		}
		return nil
	})
}

// Concurrent batches writing different bytes at one path: exactly one
// wins, whatever the interleaving (link(2) refuses to clobber).
func TestPutManyNoClobber(t *testing.T) {
	s, err := OpenDir(t.TempDir(), "t")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for round := 0; round < 20; round++ {
		p := proto.PackPath("shop1", "public.items", fmt.Sprintf("r%d", round))
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.PutMany(ctx, []PutItem{{p, []byte(fmt.Sprint("w", i))}})[0]
				if err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				} else if !errors.Is(err, ErrImmutable) {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if ok != 1 {
			t.Fatalf("round %d: %d writers succeeded, want 1", round, ok)
		}
	}
}
