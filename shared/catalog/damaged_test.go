package catalog_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// TestCompactionSkipsDamagedMember: one member file of shopA damaged in the
// store after it was indexed: a compaction pass reports it (its table,
// destinations and positions, for the caller's dead letter) and compacts
// shopB all the same; the next pass skips it without reporting it again;
// both destinations read as before. Before, the candidate order was fixed
// and the first decode failure aborted the pass: no destination of any
// table was ever compacted again.
func TestCompactionSkipsDamagedMember(t *testing.T) {
	conn := chtest.Conn(t)
	c := newCatalog(t, conn)
	store := openStore(t, "s1")
	ctx := t.Context()
	var metas []packstore.PackMeta
	for _, d := range []string{"shopA", "shopB"} {
		for i := range 3 {
			metas = append(metas, catalogtest.Write(t, store, catalogtest.Items, d, fmt.Sprintf("%s-%d", d, i), rowsFor(d, i)))
		}
	}
	index(t, c, store, metas...)
	var l catalog.Lease
	lpublish(t, c, &l)
	before := map[string][]map[string]any{}
	for _, d := range []string{"shopA", "shopB"} {
		before[d] = withoutIdentity(readAll(t, c, d, catalogtest.Items.Name, 0, 100, true))
	}
	bad := metas[1] // shopA-1
	data, err := store.Get(ctx, bad.Path())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store.Root(), bad.Path()), pt.DamageBody(data, 16), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := catalog.CompactPolicy{MinPacks: 2, SmallBytes: 1 << 30, MaxBytes: 1 << 30}
	st, l, err := c.Compact(ctx, l, lifeTTL, store, policy, "compact1")
	if err != nil {
		t.Fatalf("a pass over a damaged member: %v", err)
	}
	if len(st.Damaged) != 1 || st.Damaged[0].Path != bad.Path() || st.Damaged[0].Table != catalogtest.Items.Name ||
		fmt.Sprint(st.Damaged[0].Destinations) != "[shopA]" || st.Damaged[0].First.LSN == 0 || st.Damaged[0].Reason == "" {
		t.Fatalf("damaged %+v, want %s of shopA", st.Damaged, bad.Path())
	}
	if fmt.Sprint(st.Destinations) != "[shopB]" || st.Members != 3 {
		t.Fatalf("the pass compacted %v (%d members), want shopB's 3", st.Destinations, st.Members)
	}
	st, _, err = c.Compact(ctx, l, lifeTTL, store, policy, "compact2")
	if err != nil || len(st.Damaged) != 0 || st.Members != 0 {
		t.Fatalf("the next pass: %+v, %v; want nothing done and nothing reported", st, err)
	}
	for d, want := range before {
		if got := withoutIdentity(readAll(t, c, d, catalogtest.Items.Name, 0, 100, true)); !jsonEqualAny(got, want) {
			t.Fatalf("%s reads differently:\n got %v\nwant %v", d, got, want)
		}
	}
}

func rowsFor(dest string, i int) []catalogtest.Row {
	var out []catalogtest.Row
	for k := range 20 {
		out = append(out, catalogtest.Ins(uint64(100+i), uint64(k+1), item(int64(k), dest, map[string]any{"name": fmt.Sprintf("v%d-%d", i, k)})))
	}
	return out
}
