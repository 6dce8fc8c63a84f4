package catalog_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// FuzzIndexPack feeds whatever the pack reader accepts through the
// indexer's path: the whole-pack verification (catalog.ReadRef), then an
// INSERT beside a sound pack of the same table (so the small packs go
// through the staging writer) into the engine. Every input must end in a
// clean index or a refusal the indexer dead-letters (a corrupt pack, a
// footer that disagrees with its path, a schema the catalog cannot hold),
// never a panic or an engine failure. The seeds (a compressed and an
// uncompressed pack and segment, whole and damaged) run in `go test`.
func FuzzIndexPack(f *testing.F) {
	big, _ := catalogtest.Encode(f, catalogtest.Items, "s1", "shop1", "p-big", fuzzRows("shop1", 1500))
	small, _ := catalogtest.Encode(f, catalogtest.Items, "s1", "shop1", "p-small", fuzzRows("shop1", 20))
	sound, soundMeta := catalogtest.Encode(f, catalogtest.Items, "s1", "shop1", "p-sound", fuzzRows("shop1", 5))
	seg := func(id string, n int) []byte {
		var parts []catalogtest.Part
		for _, d := range []string{"shop1", "shop2", "shop3"} {
			parts = append(parts, catalogtest.Part{Destination: d, Rows: fuzzRows(d, n)})
		}
		b, _ := catalogtest.EncodeSegment(f, catalogtest.Items, "s1", id, parts)
		return b
	}
	bigSeg, smallSeg := seg(segID(90), 600), seg(segID(91), 5)
	for _, b := range [][]byte{big, small, pt.DamageBody(big, 64), pt.DamageBody(small, 8), pt.DamageBody(small, 200), big[:len(big)-100],
		bigSeg, smallSeg, pt.DamageBody(bigSeg, 64), pt.DamageBody(smallSeg, 8), smallSeg[:len(smallSeg)-50]} {
		f.Add(b)
		// The same without its checksum (an older file): mutations then
		// reach the structural checks and the engine.
		f.Add(pt.Unchecksummed(b))
	}
	conn := chtest.Conn(f)
	c := catalog.New(conn, catalog.Options{Prefix: "fuzz"})
	if err := c.EnsureSchema(f.Context()); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx := t.Context()
		meta, _, err := packstore.ReadPackMeta(b)
		if err != nil {
			if !errors.Is(err, packstore.ErrCorruptPack) {
				t.Fatalf("footer error not a corrupt pack: %v", err)
			}
			return
		}
		if meta.PackID == soundMeta.PackID {
			return // would collide with the sound pack's path
		}
		store := openStore(t, "s1")
		if err := store.Put(ctx, meta.Path(), b); err != nil {
			t.Fatal(err)
		}
		if err := store.Put(ctx, soundMeta.Path(), sound); err != nil {
			t.Fatal(err)
		}
		ref, err := c.ReadRef(ctx, store, meta.Path())
		if err != nil {
			if !errors.Is(err, packstore.ErrCorruptPack) && !errors.Is(err, catalog.ErrPackMismatch) {
				t.Fatalf("verification error not a corrupt pack: %v", err)
			}
			return
		}
		soundRef, err := c.ReadRef(ctx, store, soundMeta.Path())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Index(ctx, store, []catalog.PackRef{ref, soundRef}); err != nil && !errors.Is(err, catalog.ErrBadSchema) {
			t.Fatalf("indexing a verified pack: %v", err)
		}
	})
}

func fuzzRows(dest string, n int) []catalogtest.Row {
	var rows []catalogtest.Row
	for i := range n {
		rows = append(rows, catalogtest.Ins(100+uint64(i/50), uint64(i%50+1), item(int64(i), dest, map[string]any{
			"name": fmt.Sprintf("name %d", i), "qty": int32(i), "tags": []any{"a", fmt.Sprint(i)}, "ok": i%2 == 0,
		})))
	}
	return rows
}
