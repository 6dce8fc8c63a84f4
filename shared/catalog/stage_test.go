package catalog_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// TestStagedIndexEqualsInPlace indexes the same random packs (several
// destinations, inserts, TOAST-unchanged updates, deletes, NULL arrays)
// once through a staging file and once reading every pack in place, and
// requires every read, system columns included, to be identical; and the
// staging directory to be empty afterwards.
func TestStagedIndexEqualsInPlace(t *testing.T) {
	conn, _ := chtest.ConnDB(t)
	staged, inPlace := newCatalogPrefix(t, conn, "staged"), newCatalogPrefix(t, conn, "inplace")
	catalog.SetNoStaging(inPlace, true)
	store := openStore(t, "s1")
	r := rand.New(rand.NewPCG(3, 4))
	dests := []string{"shop1", "shop2", "shop3"}
	var metas []packstore.PackMeta
	for p := range 40 {
		dest := dests[r.IntN(len(dests))]
		var rows []catalogtest.Row
		for s := range 1 + r.IntN(6) {
			id := int64(r.IntN(12))
			lsn, seq := uint64(100+p), uint64(s+1)
			switch r.IntN(4) {
			case 0:
				rows = append(rows, catalogtest.Del(lsn, seq, map[string]any{"id": id, "tenant": dest}))
			case 1:
				rows = append(rows, catalogtest.Upd(lsn, seq, item(id, dest, map[string]any{"name": fmt.Sprintf("u%d", p), "big": nil, "tags": nil}), "big"))
			default:
				rows = append(rows, catalogtest.Ins(lsn, seq, item(id, dest, map[string]any{"qty": int32(p)})))
			}
		}
		metas = append(metas, catalogtest.Write(t, store, catalogtest.Items, dest, fmt.Sprintf("p%02d", p), rows))
	}
	var l1, l2 catalog.Lease
	for _, c := range []struct {
		cat *catalog.Catalog
		l   *catalog.Lease
	}{{staged, &l1}, {inPlace, &l2}} {
		for i := 0; i < len(metas); i += 16 {
			if st := index(t, c.cat, store, metas[i:min(i+16, len(metas))]...); st.Packs != min(16, len(metas)-i) {
				t.Fatalf("index stats %+v", st)
			}
		}
		publish(t, c.cat, c.l, 1000)
	}
	for _, d := range dests {
		for _, sys := range []bool{false, true} {
			a := readAll(t, staged, d, catalogtest.Items.Name, 0, 7, sys)
			b := readAll(t, inPlace, d, catalogtest.Items.Name, 0, 7, sys)
			if len(a) == 0 || !reflect.DeepEqual(a, b) {
				t.Fatalf("%s (system columns %v): staged read differs from in-place read\nstaged:   %v\nin place: %v", d, sys, a, b)
			}
		}
	}
	ents, _ := os.ReadDir(filepath.Join(conn.Dir(), "staging"))
	if len(ents) != 0 {
		t.Fatalf("staging files left behind: %v", ents)
	}
}

func newCatalogPrefix(t testing.TB, conn catalog.Conn, prefix string) *catalog.Catalog {
	t.Helper()
	c := catalog.New(conn, catalog.Options{Prefix: prefix})
	if err := c.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c
}
