package catalog_test

import (
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// TestSchemaAtVersion: a read has the columns of the table's newest change
// in its snapshot, whatever order the schemas were registered in. A column
// added and dropped again makes the first schema current again (to_jsonb of
// the source row no longer has the column); pinned reads keep the schema of
// their version. Negative control: with the latest registration, the
// dropped column comes back in the newest read.
func TestSchemaAtVersion(t *testing.T) {
	for _, be := range chtest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			for _, latest := range []bool{false, true} {
				t.Run(fmt.Sprintf("latestRegistration=%v", latest), func(t *testing.T) {
					err := schemaAtVersion(t, be.Conn, latest)
					switch {
					case !latest && err != nil:
						t.Error(err)
					case latest && err == nil:
						t.Error("negative control: reading with the latest registration passed too; the test cannot catch it")
					}
				})
			}
		})
	}
}

func schemaAtVersion(t *testing.T, conn catalog.Conn, latest bool) error {
	c := newCatalogPrefix(t, conn, fmt.Sprintf("sav%v", latest))
	catalog.SetLatestRegistration(c, latest)
	store := openStore(t, "s1")
	var l catalog.Lease
	wider := catalogtest.Items
	wider.Columns = append(append([]catalogtest.Col{}, wider.Columns...), catalogtest.Col{Name: "added", Kind: "int16", PgType: "smallint"})
	m1 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{catalogtest.Ins(1, 1, item(1, "shop1", nil))})
	m2 := catalogtest.Write(t, store, wider, "shop1", "p2", []catalogtest.Row{catalogtest.Ins(2, 1, item(2, "shop1", map[string]any{"added": int16(7)}))})
	m3 := catalogtest.Write(t, store, catalogtest.Items, "shop2", "p3", []catalogtest.Row{catalogtest.Ins(3, 1, item(3, "shop2", nil))})
	// The newest schema is registered first (a restart re-indexing older packs
	// after newer ones), the middle one last.
	index(t, c, store, m1)
	v1 := publish(t, c, &l, 1).Version
	index(t, c, store, m3)
	index(t, c, store, m2)
	v3 := publish(t, c, &l, 3).Version
	has := func(v uint64, dest string) (bool, error) {
		rows := readAll(t, c, dest, catalogtest.Items.Name, v, 1000, false)
		if len(rows) == 0 {
			return false, fmt.Errorf("version %d, %s: no rows", v, dest)
		}
		_, ok := rows[0]["added"]
		return ok, nil
	}
	for _, want := range []struct {
		v     uint64
		dest  string
		added bool
	}{{v1, "shop1", false}, {v3, "shop1", false}, {v3, "shop2", false}} {
		got, err := has(want.v, want.dest)
		if err != nil {
			return err
		}
		if got != want.added {
			return fmt.Errorf("version %d, %s: column \"added\" present %v, want %v", want.v, want.dest, got, want.added)
		}
	}
	// A pinned version whose newest change has the added column reads it.
	m4 := catalogtest.Write(t, store, wider, "shop1", "p4", []catalogtest.Row{catalogtest.Ins(4, 1, item(4, "shop1", map[string]any{"added": int16(8)}))})
	index(t, c, store, m4)
	v4 := publish(t, c, &l, 4).Version
	if got, err := has(v4, "shop2"); err != nil || !got {
		return fmt.Errorf("version %d, shop2: column \"added\" present %v (%v), want true", v4, got, err)
	}
	if got, err := has(v3, "shop1"); err != nil || got {
		return fmt.Errorf("pinned version %d after a later publish: column \"added\" present %v (%v), want false", v3, got, err)
	}
	return nil
}
