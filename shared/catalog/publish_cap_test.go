package catalog_test

import (
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// capped indexes five packs (LSNs 10..14) and publishes with the frontier
// at 50 under a cap of two packs per publish until nothing is pending. It
// returns the first snapshot that claimed a through_lsn covering every pack
// but did not hold all five (nil when the frontier promise held), and the
// snapshots.
func capped(t *testing.T, conn catalog.Conn, advance bool) (broken *catalog.Snapshot, snaps []catalog.Snapshot) {
	t.Helper()
	defer catalog.SetPublishCap(2)()
	c := newCatalog(t, conn)
	catalog.SetCapAdvances(c, advance)
	store := openStore(t, "s1")
	var metas []packstore.PackMeta
	for i := range 5 {
		metas = append(metas, catalogtest.Write(t, store, catalogtest.Items, "shop1", fmt.Sprintf("c%d", i),
			[]catalogtest.Row{catalogtest.Ins(uint64(10+i), 1, item(int64(i), "shop1", nil))}))
	}
	index(t, c, store, metas...)
	var l catalog.Lease
	for range 5 {
		s := publish(t, c, &l, 50)
		snaps = append(snaps, s)
		if s.ThroughLSN >= proto.LSN(14) && s.Packs != 5 && broken == nil {
			broken = &s
		}
		n, err := c.Pending(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	return broken, snaps
}

// TestPublishCapHoldsFrontier: a publish cut by the per-publish cap admits
// at most the cap and keeps the previous through_lsn, because packs at or
// below the caller's frontier may be among those left; the publish that
// admits the rest claims it. Every pack ends up published.
func TestPublishCapHoldsFrontier(t *testing.T) {
	for _, be := range chtest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			broken, snaps := capped(t, be.Conn, false)
			if broken != nil {
				t.Fatalf("snapshot %d claims through_lsn %s with %d of 5 packs: %+v", broken.Version, broken.Through, broken.Packs, snaps)
			}
			last := snaps[len(snaps)-1]
			if len(snaps) != 3 || snaps[0].NewPacks != 2 || snaps[1].NewPacks != 2 || last.NewPacks != 1 || last.Packs != 5 || last.ThroughLSN != 50 {
				t.Fatalf("want publishes of 2, 2 and 1 packs, the last claiming 50: %+v", snaps)
			}
		})
	}
}

// TestPublishCapNegativeControl lets a capped publish claim the frontier:
// a snapshot then claims through_lsn 50 without every pack at or below it
// (the test above would fail).
func TestPublishCapNegativeControl(t *testing.T) {
	broken, snaps := capped(t, chtest.Conn(t), true)
	if broken == nil {
		t.Fatalf("with the cap claiming the frontier every snapshot still held its packs: the test would not catch it: %+v", snaps)
	}
	t.Logf("negative control: snapshot %d claims %s with %d of 5 packs", broken.Version, broken.Through, broken.Packs)
}

// TestRebuildPublishesPastTheCap: a rebuild over more packs than one
// publish admits publishes until every pack is a member.
func TestRebuildPublishesPastTheCap(t *testing.T) {
	defer catalog.SetPublishCap(2)()
	conn := chtest.Conn(t)
	store := openStore(t, "s1")
	for i := range 5 {
		catalogtest.Write(t, store, catalogtest.Items, "shop1", fmt.Sprintf("r%d", i),
			[]catalogtest.Row{catalogtest.Ins(uint64(10+i), 1, item(int64(i), "shop1", nil))})
	}
	st, err := catalog.Rebuild(t.Context(), conn, store, catalog.Options{})
	if err != nil || st.Packs != 5 {
		t.Fatalf("rebuild: %+v %v", st, err)
	}
	c := newCatalog(t, conn)
	if n, err := c.Pending(t.Context()); err != nil || n != 0 {
		t.Fatalf("after rebuild %d packs pending (%v)", n, err)
	}
	s, err := c.Snapshot(t.Context(), st.Version)
	if err != nil || s.Packs != 5 {
		t.Fatalf("rebuild's last snapshot %+v %v, want 5 packs", s, err)
	}
	if rows := readAll(t, c, "shop1", catalogtest.Items.Name, 0, 100, false); len(rows) != 5 {
		t.Fatalf("after rebuild %d rows, want 5", len(rows))
	}
}
