package catalog_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// dump returns the watermark table's contents (every snapshot, its
// high-water and removals).
func dump(t testing.TB, conn catalog.Conn) string {
	t.Helper()
	var out string
	for _, q := range []string{
		"SELECT * FROM sluice_watermark ORDER BY ALL",
	} {
		res, err := conn.Query(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		out += fmt.Sprint(res.Rows) + "\n"
	}
	return out
}

// wedge runs the wedge scenario: publisher A renews its lease, and between
// that renewal and its statements its lease expires and B takes over. It
// reports whether A's publish wrote anything to the watermark,
// and A's error.
func wedge(t *testing.T, conn catalog.Conn, fenced bool) (wrote bool, err error) {
	ctx := t.Context()
	a := newCatalog(t, conn)
	b := catalog.New(conn, catalog.Options{Prefix: "sluice"})
	store := openStore(t, "s1")
	m := catalogtest.Write(t, store, catalogtest.Items, "shop1", "w1", []catalogtest.Row{catalogtest.Ins(10, 1, item(1, "shop1", nil))})
	index(t, a, store, m)
	var la catalog.Lease
	publish(t, a, &la, 10) // version 1, a clean publish
	pinned := readAll(t, a, "shop1", catalogtest.Items.Name, 1, 100, true)
	m2 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "w2", []catalogtest.Row{catalogtest.Ins(11, 1, item(2, "shop1", nil))})
	index(t, a, store, m2)

	const shortTTL = 300 * time.Millisecond
	la, err = a.AcquireLease(ctx, "a", shortTTL)
	if !errors.Is(err, catalog.ErrLeaseHeld) {
		t.Fatalf("a re-acquiring while its own long lease is live: %v", err)
	}
	if err := a.ReleaseLease(ctx, la0(t, a)); err != nil {
		t.Fatal(err)
	}
	la, err = a.AcquireLease(ctx, "a", shortTTL)
	if err != nil {
		t.Fatal(err)
	}
	before := dump(t, conn)
	catalog.SetNoFence(a, !fenced)
	catalog.SetBeforeStatements(a, func() {
		// A stalls past its lease; B takes over legitimately.
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err := b.AcquireLease(ctx, "b", time.Minute)
			if err == nil {
				return
			}
			if !errors.Is(err, catalog.ErrLeaseHeld) || time.Now().After(deadline) {
				t.Errorf("b taking over: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond) // waiting out a server-clock lease; no retry signal exists
		}
	})
	_, err = a.Publish(ctx, la, shortTTL, 11)
	after := dump(t, conn)
	if got := readAll(t, b, "shop1", catalogtest.Items.Name, 1, 100, true); !reflect.DeepEqual(got, pinned) {
		t.Errorf("a read pinned at version 1 changed: %v", got)
	}
	return before != after, err
}

// la0 returns the lease publish() took for "test".
func la0(t *testing.T, c *catalog.Catalog) catalog.Lease {
	t.Helper()
	res, err := c.Conn().Query(t.Context(), "SELECT term, lease_id, holder FROM sluice_publisher_lease ORDER BY term DESC LIMIT 1")
	if err != nil {
		t.Fatal(err)
	}
	r := res.Rows[0]
	return catalog.Lease{Term: r[0].(uint64), LeaseID: r[1].(string), Holder: r[2].(string)}
}

func TestWedgedPublisherWritesNothing(t *testing.T) {
	for _, be := range chtest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			wrote, err := wedge(t, be.Conn, true)
			if wrote {
				t.Errorf("a publisher whose lease was taken over wrote to the watermark")
			}
			if !errors.Is(err, catalog.ErrLeaseLost) {
				t.Errorf("publish error = %v, want ErrLeaseLost", err)
			}
		})
	}
}

// TestWedgeNegativeControl removes the fence: the same scenario must then
// write (the test above would fail).
func TestWedgeNegativeControl(t *testing.T) {
	wrote, err := wedge(t, chtest.Conn(t), false)
	if !wrote {
		t.Fatalf("without the fence the wedged publisher wrote nothing (err %v): the wedge test would not catch a missing fence", err)
	}
	t.Logf("negative control: without the fence the taken-over publisher published (err %v)", err)
}

func TestPinnedReadIsStable(t *testing.T) {
	for _, be := range chtest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := newCatalog(t, be.Conn)
			store := openStore(t, "s1")
			var l catalog.Lease
			var metas []packstore.PackMeta
			for i := range 3 {
				metas = append(metas, catalogtest.Write(t, store, catalogtest.Items, "shop1", fmt.Sprintf("a%d", i), []catalogtest.Row{
					catalogtest.Ins(uint64(100+i), 1, item(int64(i), "shop1", nil)),
				}))
			}
			index(t, c, store, metas...)
			v1 := publish(t, c, &l, 100)
			pinned := readAll(t, c, "shop1", catalogtest.Items.Name, v1.Version, 2, true)
			for i := range 4 {
				m := catalogtest.Write(t, store, catalogtest.Items, "shop1", fmt.Sprintf("b%d", i), []catalogtest.Row{
					catalogtest.Upd(uint64(200+i), 1, item(int64(i%3), "shop1", map[string]any{"name": "changed"})),
					catalogtest.Del(uint64(200+i), 2, map[string]any{"id": int64(i % 3), "tenant": "shop1"}),
					catalogtest.Ins(uint64(200+i), 3, item(int64(10+i), "shop1", nil)),
				})
				index(t, c, store, m)
				publish(t, c, &l, 0)
				if got := readAll(t, c, "shop1", catalogtest.Items.Name, v1.Version, 2, true); !reflect.DeepEqual(got, pinned) {
					t.Fatalf("read pinned at %d changed after publish %d:\n%v\n%v", v1.Version, i, got, pinned)
				}
			}
			snaps, err := c.Snapshots(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(snaps) != 5 || snaps[4].Packs != 7 || snaps[4].ThroughLSN != 100 || snaps[0].Packs != 3 {
				t.Errorf("snapshots %+v", snaps)
			}
			if s, err := c.Snapshot(t.Context(), 3); err != nil || s.Packs != 5 {
				t.Errorf("snapshot 3: %+v %v", s, err)
			}
			if latest := readAll(t, c, "shop1", catalogtest.Items.Name, 0, 1000, false); len(latest) != 4 {
				t.Errorf("latest: %v", latest)
			}
		})
	}
}

func TestLeaseLifecycle(t *testing.T) {
	ctx := t.Context()
	conn := chtest.Conn(t)
	a := newCatalog(t, conn)
	b := catalog.New(conn, catalog.Options{})
	la, err := a.AcquireLease(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireLease(ctx, "b", time.Minute); !errors.Is(err, catalog.ErrLeaseHeld) {
		t.Fatalf("b acquired a live lease: %v", err)
	}
	la2, err := a.RenewLease(ctx, la, time.Minute)
	if err != nil || la2.Term <= la.Term || la2.LeaseID != la.LeaseID {
		t.Fatalf("renew: %+v %v", la2, err)
	}
	// A stale lease (old term, same id) cannot release the live one... it can,
	// the id is the fencing identity; a stranger cannot.
	if err := b.ReleaseLease(ctx, catalog.Lease{LeaseID: "stranger"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireLease(ctx, "b", time.Minute); !errors.Is(err, catalog.ErrLeaseHeld) {
		t.Fatalf("a stranger's release freed a live lease: %v", err)
	}
	if err := a.ReleaseLease(ctx, la2); err != nil {
		t.Fatal(err)
	}
	lb, err := b.AcquireLease(ctx, "b", time.Minute)
	if err != nil {
		t.Fatalf("b after release: %v", err)
	}
	if _, err := a.RenewLease(ctx, la2, time.Minute); !errors.Is(err, catalog.ErrLeaseLost) {
		t.Fatalf("a renewed after b took over: %v", err)
	}
	if _, err := a.Publish(ctx, la2, time.Minute, 0); !errors.Is(err, catalog.ErrLeaseLost) {
		t.Fatalf("a published after b took over: %v", err)
	}
	if _, err := b.Publish(ctx, lb, time.Minute, 0); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseInstanceLease: a dead process instance's live publisher
// lease (held by one of its services) is released, and another holder
// takes it at once; another instance's lease (the same characters plus
// more) is left alone, and a released lease's old holder is fenced.
func TestReleaseInstanceLease(t *testing.T) {
	ctx := t.Context()
	conn := chtest.Conn(t)
	a := newCatalog(t, conn)
	b := catalog.New(conn, catalog.Options{})
	if ok, err := b.ReleaseInstanceLease(ctx, "host-1-dead"); ok || err != nil {
		t.Fatalf("no lease yet: released=%v err=%v", ok, err)
	}
	la, err := a.AcquireLease(ctx, "host-1-dead0/publisher", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.ReleaseInstanceLease(ctx, "host-1-dead"); ok || err != nil {
		t.Fatalf("another instance's lease: released=%v err=%v", ok, err)
	}
	if err := a.ReleaseLease(ctx, la); err != nil {
		t.Fatal(err)
	}
	la, err = a.AcquireLease(ctx, "host-1-dead/publisher", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.ReleaseInstanceLease(ctx, "host-1-dead"); !ok || err != nil {
		t.Fatalf("the dead instance's lease: released=%v err=%v", ok, err)
	}
	if _, err := b.AcquireLease(ctx, "host-2-next/publisher", time.Minute); err != nil {
		t.Fatalf("taking the released lease: %v", err)
	}
	if _, err := a.RenewLease(ctx, la, time.Minute); !errors.Is(err, catalog.ErrLeaseLost) {
		t.Fatalf("the dead instance's lease renewed after the takeover: %v", err)
	}
	if _, err := b.ReleaseInstanceLease(ctx, "a/b"); err == nil {
		t.Fatal("an instance name with '/' was accepted")
	}
}

// stalled runs the stalled-inventory scenario: after a first publish, packs
// s2 (a change at LSN 102) and s3 (LSN 103) are indexed, and their
// inventory rows are stamped ten minutes before the moment they became
// visible. With step false only s2's is (an insert that stalled between
// its stamp and its commit); with step true both are (the server clock
// stepped back ten minutes after the first publish). The frontier then
// proves 103 (both rows are committed) and a publish claims it. It returns
// the snapshot and whether key 2 reads at it; with clock the publish admits
// by the clock window it had before the inventory high-water.
func stalled(t *testing.T, conn catalog.Conn, step, clock bool) (catalog.Snapshot, bool) {
	ctx := t.Context()
	c := newCatalog(t, conn)
	catalog.SetClockWindow(c, clock)
	store := openStore(t, "s1")
	pack := func(id string, key int64) packstore.PackMeta {
		return catalogtest.Write(t, store, catalogtest.Items, "shop1", id, []catalogtest.Row{catalogtest.Ins(uint64(100+key), 1, item(key, "shop1", nil))})
	}
	var l catalog.Lease
	index(t, c, store, pack("s1", 1))
	publish(t, c, &l, 101)
	index(t, c, store, pack("s2", 2))
	index(t, c, store, pack("s3", 3))
	backdated := "pack_id = 's2'"
	if step {
		backdated = "pack_id IN ('s2', 's3')"
	}
	// The merge folds the three rows into one part: the block numbers the
	// publish admits by must survive it.
	for _, q := range []string{
		"ALTER TABLE sluice_packs UPDATE indexed_at = indexed_at - 600000000 WHERE " + backdated + " SETTINGS mutations_sync = 2",
		"OPTIMIZE TABLE sluice_packs FINAL",
	} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	n, err := c.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := publish(t, c, &l, 103)
	if !clock && (n != 2 || s.NewPacks != 2) {
		t.Errorf("pending %d and new packs %d before and at the publish of s2 and s3, want 2 and 2", n, s.NewPacks)
	}
	ids := map[int64]bool{}
	for _, r := range readAll(t, c, "shop1", catalogtest.Items.Name, s.Version, 100, false) {
		ids[int64(r["id"].(float64))] = true
	}
	return s, ids[2]
}

// TestStalledIndexerPackIsPublished: a publish never claims a through_lsn
// its members do not prove complete. The frontier proved 103, so pack s2
// (LSN 102) has a committed inventory row; a snapshot that claims 102 or
// more must hold it, however old its stamp.
func TestStalledIndexerPackIsPublished(t *testing.T) {
	for _, step := range []bool{false, true} {
		for _, be := range chtest.Backends(t) {
			t.Run(fmt.Sprintf("clockStepBack=%v/%s", step, be.Name), func(t *testing.T) {
				s, has := stalled(t, be.Conn, step, false)
				if s.ThroughLSN >= 102 && !has {
					t.Errorf("version %d claims through_lsn %s but the change at 0/66 (pack s2) is missing from it", s.Version, s.ThroughLSN)
				}
				if s.ThroughLSN != 103 || !has {
					t.Errorf("version %d: through_lsn %s, key 2 read %v; want 0/67 with key 2", s.Version, s.ThroughLSN, has)
				}
			})
		}
	}
}

// TestStalledIndexerNegativeControl records as the high-water the highest
// block among the rows stamped within the clock window instead of the
// highest block the statement sees: with the clock stepped back (both rows
// stamped ten minutes early) the publish then claims 103 without s2 (the
// test above would fail). With only s2 stamped early the clock window still
// holds s3, whose block is above s2's, so membership by block admits s2
// anyway: only the step-back case can show the broken rule.
func TestStalledIndexerNegativeControl(t *testing.T) {
	s, has := stalled(t, chtest.Conn(t), true, true)
	if has || s.ThroughLSN < 102 {
		t.Fatalf("with the clock window the publish claimed %s with key 2 read %v: the test would not catch a claim past a pack left out", s.ThroughLSN, has)
	}
	t.Logf("negative control (clock stepped back): version %d claims %s without the pack at 0/66", s.Version, s.ThroughLSN)
}
