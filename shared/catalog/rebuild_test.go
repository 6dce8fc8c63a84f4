package catalog_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// TestRebuildNeverReusesVersions: a version read before a rebuild is never
// published again by the rebuilt catalog (a pinned version would read other
// rows), and reading it fails with ErrRebuiltPast. A second rebuild numbers
// above the first's.
func TestRebuildNeverReusesVersions(t *testing.T) {
	for _, be := range chtest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := t.Context()
			c := newCatalog(t, be.Conn)
			store := openStore(t, "s1")
			var l catalog.Lease
			var top uint64
			for i := range 3 {
				m := catalogtest.Write(t, store, catalogtest.Items, "shop1", fmt.Sprintf("p%d", i), []catalogtest.Row{catalogtest.Ins(uint64(100+i), 1, item(int64(i), "shop1", nil))})
				index(t, c, store, m)
				top = publish(t, c, &l, 0).Version
			}
			if got := readAll(t, c, "shop1", catalogtest.Items.Name, 1, 100, false); len(got) != 1 {
				t.Fatalf("version 1 before the rebuild reads %d rows, want 1", len(got))
			}
			if err := c.ReleaseLease(ctx, l); err != nil {
				t.Fatal(err)
			}
			want := top
			for round := range 2 {
				st, err := catalog.Rebuild(ctx, be.Conn, store, catalog.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if st.Version <= want || st.Floor != want {
					t.Errorf("rebuild %d published version %d with floor %d; every version up to %d was published before it", round, st.Version, st.Floor, want)
				}
				r := catalog.New(be.Conn, catalog.Options{})
				if err := r.EnsureSchema(ctx); err != nil {
					t.Fatal(err)
				}
				snaps, err := r.Snapshots(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range snaps {
					if s.Version <= want {
						t.Errorf("rebuild %d: version %d published again", round, s.Version)
					}
				}
				for _, v := range []uint64{1, want} {
					_, err := r.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: catalogtest.Items.Name, Version: v, Limit: 10})
					if !errors.Is(err, catalog.ErrRebuiltPast) || !errors.Is(err, catalog.ErrNoSnapshot) {
						t.Errorf("rebuild %d: reading version %d: %v, want ErrRebuiltPast and ErrNoSnapshot", round, v, err)
					}
					if _, err := r.Snapshot(ctx, v); !errors.Is(err, catalog.ErrRebuiltPast) {
						t.Errorf("rebuild %d: snapshot %d: %v, want ErrRebuiltPast", round, v, err)
					}
				}
				if got := readAll(t, r, "shop1", catalogtest.Items.Name, st.Version, 100, false); len(got) != 3 {
					t.Errorf("rebuild %d: version %d reads %d rows, want 3", round, st.Version, len(got))
				}
				want = st.Version
			}
		})
	}
}
