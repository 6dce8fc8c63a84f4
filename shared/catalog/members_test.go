package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// keysAt reads dest's items at version and returns their ids, sorted.
func keysAt(t testing.TB, c *catalog.Catalog, dest string, version uint64) []int64 {
	t.Helper()
	var ids []int64
	for _, r := range readAll(t, c, dest, catalogtest.Items.Name, version, 100, false) {
		ids = append(ids, int64(r["id"].(float64)))
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// TestRebuildPublishesEverything: a rebuild's one publish admits every
// pack of the store (a snapshot lists nothing, so there is no cap).
func TestRebuildPublishesEverything(t *testing.T) {
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
	if err != nil || s.Packs != 5 || s.NewPacks != 5 {
		t.Fatalf("rebuild's snapshot %+v %v, want 5 packs", s, err)
	}
	if got := keysAt(t, c, "shop1", 0); len(got) != 5 {
		t.Fatalf("after rebuild keys %v, want 5", got)
	}
}

// reindexMerge publishes pack p1 (key 1) at v1, then gives the inventory a
// second row of p1, as a second indexer that raced the first writes it (a
// real inventory INSERT of the same row: no two indexers can be made to
// race on demand), publishes p2 (key 2) at v2 above that copy, and merges
// the inventory (OPTIMIZE ... FINAL). It returns v1's keys and members
// before and after the merge. replacing creates the inventory as schema
// 6's ReplacingMergeTree.
func reindexMerge(t *testing.T, conn catalog.Conn, replacing bool) (before, after []int64, mBefore, mAfter []catalog.Member) {
	ctx := t.Context()
	c := catalog.New(conn, catalog.Options{Prefix: "sluice"})
	catalog.SetReplacingInventory(c, replacing)
	if err := c.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	store := openStore(t, "s1")
	var l catalog.Lease
	index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{catalogtest.Ins(10, 1, item(1, "shop1", nil))}))
	v1 := publish(t, c, &l, 10).Version
	if err := conn.Exec(ctx, "INSERT INTO sluice_packs SELECT store_id, pack_id, destination, table, path, fingerprint, first_lsn, first_seq, last_lsn, last_seq, rows, tombstones, bytes, indexed_at, trace FROM sluice_packs WHERE pack_id = 'p1'"); err != nil {
		t.Fatal(err)
	}
	index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "p2", []catalogtest.Row{catalogtest.Ins(20, 1, item(2, "shop1", nil))}))
	publish(t, c, &l, 20)
	before = keysAt(t, c, "shop1", v1)
	var err error
	if mBefore, err = c.Members(ctx, v1, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "OPTIMIZE TABLE sluice_packs FINAL"); err != nil {
		t.Fatal(err)
	}
	// A fresh handle: nothing remembered from before the merge.
	c2 := newCatalog(t, conn)
	after = keysAt(t, c2, "shop1", v1)
	if mAfter, err = c2.Members(ctx, v1, "", ""); err != nil {
		t.Fatal(err)
	}
	return before, after, mBefore, mAfter
}

// TestReindexMergeKeepsOldSnapshots: a pack indexed twice keeps its first
// inventory row through a merge, so a snapshot published before the copy
// reads identically after the merge.
func TestReindexMergeKeepsOldSnapshots(t *testing.T) {
	before, after, mb, ma := reindexMerge(t, chtest.Conn(t), false)
	if !reflect.DeepEqual(before, []int64{1}) || !reflect.DeepEqual(after, before) || !reflect.DeepEqual(ma, mb) || len(mb) != 1 {
		t.Fatalf("v1 read %v with members %v before the merge, %v with %v after; want [1] both times", before, mb, after, ma)
	}
}

// TestReindexMergeNegativeControl: with schema 6's ReplacingMergeTree the
// merge keeps the copy, above v1's high-water, and v1 reads without key 1
// (the test above would fail).
func TestReindexMergeNegativeControl(t *testing.T) {
	before, after, _, ma := reindexMerge(t, chtest.Conn(t), true)
	if reflect.DeepEqual(after, before) {
		t.Fatalf("with a ReplacingMergeTree inventory v1 still reads %v after the merge: the test would not catch it", after)
	}
	t.Logf("negative control: v1 read %v before the merge, %v (members %v) after", before, after, ma)
}

// TestRemovalVanishesFromLaterSnapshots: a member removed by
// PublishReplace is not read at the replacing snapshot or later, the
// snapshot before it reads as before, a segment's other destinations keep
// their rows, and the replacement claims the previous through_lsn.
func TestRemovalVanishesFromLaterSnapshots(t *testing.T) {
	ctx := t.Context()
	c := newCatalog(t, chtest.Conn(t))
	store := openStore(t, "s1")
	var l catalog.Lease
	index(t, c, store,
		catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{catalogtest.Ins(10, 1, item(1, "shop1", nil))}),
		catalogtest.Write(t, store, catalogtest.Items, "shop1", "p2", []catalogtest.Row{catalogtest.Ins(11, 1, item(2, "shop1", nil))}),
		catalogtest.WriteSegment(t, store, catalogtest.Items, segID(1), []catalogtest.Part{
			{Destination: "shop1", Rows: []catalogtest.Row{catalogtest.Ins(12, 1, item(3, "shop1", nil))}},
			{Destination: "shop2", Rows: []catalogtest.Row{catalogtest.Ins(12, 2, item(4, "shop2", nil))}},
		}))
	v1 := publish(t, c, &l, 12)
	if v1.Packs != 4 {
		t.Fatalf("v1 %+v, want 4 members", v1)
	}
	// p4 is indexed before the replacement: the replacement admits it.
	index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "p4", []catalogtest.Row{catalogtest.Ins(13, 1, item(5, "shop1", nil))}))
	table := catalogtest.Items.Name
	rm := []catalog.Member{
		{StoreID: "s1", PackID: "p1", Destination: "shop1", Table: table},
		{StoreID: "s1", PackID: segID(1), Destination: "shop1", Table: table},
	}
	res, err := c.PublishReplace(ctx, l, ttl, rm)
	if err != nil {
		t.Fatal(err)
	}
	l = res.Lease
	v2 := res.Snapshot
	if v2.ThroughLSN != v1.ThroughLSN || v2.NewPacks != 1 || v2.Packs != 3 {
		t.Fatalf("replacement %+v after %+v: want through_lsn kept, 1 new member, 3 members", v2, v1)
	}
	if got := keysAt(t, c, "shop1", v1.Version); !reflect.DeepEqual(got, []int64{1, 2, 3}) {
		t.Errorf("v1 reads %v after the replacement, want [1 2 3]", got)
	}
	if got := keysAt(t, c, "shop1", v2.Version); !reflect.DeepEqual(got, []int64{2, 5}) {
		t.Errorf("v2 reads %v, want [2 5]", got)
	}
	if got := keysAt(t, c, "shop2", v2.Version); !reflect.DeepEqual(got, []int64{4}) {
		t.Errorf("shop2 reads %v at v2, want [4] (its part of the segment is not removed)", got)
	}
	ms, err := c.Members(ctx, v2.Version, "shop1", table)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.PackID)
	}
	if !reflect.DeepEqual(ids, []string{"p2", "p4"}) {
		t.Errorf("shop1's members at v2: %v, want [p2 p4]", ids)
	}
	// Later snapshots keep the removal; the latest view follows them.
	v3 := publish(t, c, &l, 30)
	if got := keysAt(t, c, "shop1", v3.Version); !reflect.DeepEqual(got, []int64{2, 5}) {
		t.Errorf("v3 reads %v, want [2 5]", got)
	}
	res2, err := c.Conn().Query(ctx, "SELECT _sluice_destination, id FROM `sluice_latest.public.items` ORDER BY _sluice_destination, id")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(res2.Rows); got != "[[shop1 2] [shop1 5] [shop2 4]]" {
		t.Errorf("latest view %s, want shop1 2 and 5, shop2 4", got)
	}
	dests, err := c.Destinations(ctx, v2.Version)
	if err != nil || !reflect.DeepEqual(dests[table], []string{"shop1", "shop2"}) {
		t.Errorf("destinations at v2 %v %v", dests, err)
	}
	// A removed member cannot be removed again.
	if _, err := c.PublishReplace(ctx, l, ttl, rm[:1]); !errors.Is(err, catalog.ErrNotMember) {
		t.Errorf("removing a removed member: %v, want ErrNotMember", err)
	}
}

// replaceNonMember publishes p1 (key 1), indexes p2 (key 2) without
// publishing it and asks a replacement to remove p2, then publishes with
// the frontier past p2. It returns the replacement's error and whether
// key 2 reads at the last snapshot.
func replaceNonMember(t *testing.T, unchecked bool) (bool, error) {
	ctx := t.Context()
	c := newCatalog(t, chtest.Conn(t))
	catalog.SetNoRemovalCheck(c, unchecked)
	store := openStore(t, "s1")
	var l catalog.Lease
	index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{catalogtest.Ins(10, 1, item(1, "shop1", nil))}))
	publish(t, c, &l, 10)
	index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "p2", []catalogtest.Row{catalogtest.Ins(20, 1, item(2, "shop1", nil))}))
	res, rerr := c.PublishReplace(ctx, l, ttl, []catalog.Member{{StoreID: "s1", PackID: "p2", Destination: "shop1", Table: catalogtest.Items.Name}})
	if rerr == nil {
		l = res.Lease
	}
	last := publish(t, c, &l, 20)
	got := keysAt(t, c, "shop1", last.Version)
	return len(got) == 2, rerr
}

// TestReplaceRefusesNonMember: a replacement may remove only members of
// the latest snapshot; a pack indexed but not yet published is refused, and
// the next publish admits it.
func TestReplaceRefusesNonMember(t *testing.T) {
	has, err := replaceNonMember(t, false)
	if !errors.Is(err, catalog.ErrNotMember) || !has {
		t.Fatalf("removing an unpublished pack: %v (want ErrNotMember); key 2 read afterwards %v (want true)", err, has)
	}
}

// TestReplaceRefusesNonMemberNegativeControl: without the check the
// replacement admits p2 and removes it at once, and a snapshot claiming
// the frontier past p2 reads without it (the test above would fail).
func TestReplaceRefusesNonMemberNegativeControl(t *testing.T) {
	has, err := replaceNonMember(t, true)
	if err != nil || has {
		t.Fatalf("without the removal check: replacement error %v, key 2 read %v: the test would not catch it", err, has)
	}
}

// recConn records the statements run through it.
type recConn struct {
	catalog.Conn
	mu sync.Mutex
	qs []string
}

func (r *recConn) Query(ctx context.Context, q string) (*catalog.Result, error) {
	r.mu.Lock()
	r.qs = append(r.qs, q)
	r.mu.Unlock()
	return r.Conn.Query(ctx, q)
}

func (r *recConn) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	qs := r.qs
	r.qs = nil
	return qs
}

// flatLimit bounds the rows any one table read of a statement may read
// (max_rows_to_read, checked by the engine on each read of a table): far
// below the snapshots the flatness test publishes.
const flatLimit = 600

// limited runs q with the engine's read limit.
func limited(ctx context.Context, conn catalog.Conn, q string) error {
	s := fmt.Sprintf("max_rows_to_read = %d, read_overflow_mode = 'throw'", flatLimit)
	if i := strings.LastIndex(q, " SETTINGS "); i >= 0 && !strings.ContainsAny(q[i:], ")'") {
		q += ", " + s
	} else {
		q += " SETTINGS " + s
	}
	_, err := conn.Query(ctx, q)
	return err
}

// TestMembershipIsFlat: after 2,000 snapshots (with removals among them),
// every statement that Members, Destinations and a pinned or latest Read
// issue reads at most flatLimit rows of any table: what a read costs does
// not grow with the number of snapshots. Its control: statements that
// read every snapshot's row (the latest high-water by an aggregate over
// the watermark, as schema 6 read it, alone and as a subquery) trip the
// same limit, so the limit does see reads and subqueries over the history.
// (max(version) and count() are no control: the engine answers them from
// part metadata.)
func TestMembershipIsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 publishes")
	}
	ctx := t.Context()
	conn := chtest.Conn(t)
	rec := &recConn{Conn: conn}
	c := newCatalog(t, rec)
	store := openStore(t, "s1")
	var l catalog.Lease
	const snapshots = 2000
	var mid uint64
	table := catalogtest.Items.Name
	for i := range snapshots {
		if i%500 == 0 {
			n := int64(i / 500)
			index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", fmt.Sprintf("f%d", n),
				[]catalogtest.Row{catalogtest.Ins(uint64(10+n), 1, item(n, "shop1", nil))}))
		}
		if i == 1200 {
			res, err := c.PublishReplace(ctx, l, ttl, []catalog.Member{{StoreID: "s1", PackID: "f0", Destination: "shop1", Table: table}})
			if err != nil {
				t.Fatal(err)
			}
			l = res.Lease
			continue
		}
		if s := publish(t, c, &l, 0); i == 600 {
			mid = s.Version
		}
	}
	latest, err := c.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if latest.Version < snapshots {
		t.Fatalf("latest %+v, want %d snapshots", latest, snapshots)
	}
	rec.take()
	c2 := catalog.New(rec, catalog.Options{Prefix: "sluice"}) // nothing cached
	if ms, err := c2.Members(ctx, latest.Version, "shop1", table); err != nil || len(ms) != 3 {
		t.Fatalf("members %v %v, want f1..f3", ms, err)
	}
	if _, err := c2.Destinations(ctx, latest.Version); err != nil {
		t.Fatal(err)
	}
	if got := keysAt(t, c2, "shop1", 0); !reflect.DeepEqual(got, []int64{1, 2, 3}) {
		t.Fatalf("latest reads %v, want [1 2 3]", got)
	}
	if got := keysAt(t, c2, "shop1", mid); !reflect.DeepEqual(got, []int64{0, 1}) {
		t.Fatalf("version %d reads %v, want [0 1]", mid, got)
	}
	qs := rec.take()
	if len(qs) == 0 {
		t.Fatal("no statements recorded")
	}
	for _, q := range qs {
		if err := limited(ctx, conn, q); err != nil {
			t.Errorf("statement reads more than %d rows of a table after %d snapshots: %v\n%s", flatLimit, snapshots, err, q)
		}
	}
	t.Logf("%d statements each read at most %d rows of any table", len(qs), flatLimit)
	// The control: the history-wide reads trip the limit.
	for _, q := range []string{
		"SELECT max(inventory_block) FROM sluice_watermark", // schema 6's latest high-water
		"SELECT count() FROM sluice_packs WHERE _block_number <= (SELECT max(inventory_block) FROM sluice_watermark WHERE version <= 1900)",
	} {
		if err := limited(ctx, conn, q); err == nil {
			t.Errorf("control %q reads the watermark's %d rows within the limit: the check is blind", q, snapshots)
		}
	}
}
