package catalog_test

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// retentionFixture publishes six snapshots of shop1's items: version 1
// holds items 1 and 2 (name item-1, item-2), version 2 renames item 1, and
// versions 3-6 each add one item. It returns the catalog and the lease.
func retentionFixture(t *testing.T, opts catalog.Options) (*catalog.Catalog, catalog.Lease) {
	t.Helper()
	conn := chtest.Conn(t)
	c := catalog.New(conn, opts)
	if err := c.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	store := openStore(t, "s1")
	var l catalog.Lease
	index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{
		catalogtest.Ins(10, 1, item(1, "shop1", nil)), catalogtest.Ins(10, 2, item(2, "shop1", nil))}))
	publish(t, c, &l, 10)
	index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "p2", []catalogtest.Row{
		catalogtest.Upd(20, 1, item(1, "shop1", map[string]any{"name": "renamed"}))}))
	publish(t, c, &l, 20)
	for i := int64(3); i <= 6; i++ {
		index(t, c, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "p"+strconv.FormatInt(i, 10), []catalogtest.Row{
			catalogtest.Ins(uint64(i*10), 1, item(i, "shop1", nil))}))
		publish(t, c, &l, proto.LSN(i*10))
	}
	return c, l
}

func expiredErr(t *testing.T, err error, version, oldest uint64) {
	t.Helper()
	var ee *catalog.ExpiredError
	if !errors.As(err, &ee) || !errors.Is(err, catalog.ErrExpired) {
		t.Fatalf("reading expired version %d: want ErrExpired, got %v", version, err)
	}
	if ee.Version != version || ee.OldestRetained != oldest {
		t.Fatalf("expired error %+v: want version %d, oldest retained %d", ee, version, oldest)
	}
	if !strings.Contains(err.Error(), "oldest retained snapshot is "+strconv.FormatUint(oldest, 10)) {
		t.Fatalf("message %q does not name the oldest retained snapshot %d", err, oldest)
	}
}

// TestSnapshotRetention: with retain_min 2 and a retention every snapshot
// is older than, the publisher's advance expires versions 2-4; version 1,
// pinned, reads identically to before; a fresh read of an expired version
// answers ErrExpired naming the oldest retained (5); a read that started
// before the horizon moved finishes within gc_grace; the listing pages
// every retained snapshot once, pins marked; unpinning expires at once;
// and a publisher without the live lease cannot move the horizon.
func TestSnapshotRetention(t *testing.T) {
	ctx := t.Context()
	c, l := retentionFixture(t, catalog.Options{Prefix: "sluice"})
	items := catalogtest.Items.Name
	v1 := readAll(t, c, "shop1", items, 1, 100, true)
	if len(v1) != 2 {
		t.Fatalf("version 1 holds %d rows, want 2", len(v1))
	}
	pin, err := c.PinSnapshot(ctx, 1, "audit 2026-Q4")
	if err != nil {
		t.Fatal(err)
	}
	if pin.Version != 1 || pin.Reason != "audit 2026-Q4" {
		t.Fatalf("pin %+v", pin)
	}
	// A read of version 2 that started before the horizon moves.
	first, err := c.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: items, Version: 2, Limit: 1})
	if err != nil || first.Next == "" {
		t.Fatalf("first page of version 2: %+v, %v", first, err)
	}

	// The fence: a lease that is not the live head moves nothing.
	stale := l
	stale.LeaseID = "not-the-head"
	if h, err := c.AdvanceRetention(ctx, stale, catalog.RetentionPolicy{Retention: time.Microsecond, RetainMin: 2}); err != nil || h != 0 {
		t.Fatalf("advance without the lease: horizon %d, %v; want 0", h, err)
	}
	// Negative control: without the fence the same stale lease moves it.
	catalog.SetNoFence(c, true)
	if h, err := c.AdvanceRetention(ctx, stale, catalog.RetentionPolicy{Retention: time.Microsecond, RetainMin: 5}); err != nil || h != 2 {
		t.Fatalf("advance without the fence: horizon %d, %v; want 2", h, err)
	}
	catalog.SetNoFence(c, false)
	h, err := c.AdvanceRetention(ctx, l, catalog.RetentionPolicy{Retention: time.Microsecond, RetainMin: 2})
	if err != nil || h != 5 {
		t.Fatalf("advance: horizon %d, %v; want 5", h, err)
	}
	// The horizon never moves down (a wider policy keeps it).
	if h, err := c.AdvanceRetention(ctx, l, catalog.RetentionPolicy{Retention: 24 * time.Hour, RetainMin: 100}); err != nil || h != 5 {
		t.Fatalf("advance with a wider policy: horizon %d, %v; want 5", h, err)
	}

	for _, v := range []uint64{2, 3, 4} {
		_, err := c.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: items, Version: v})
		expiredErr(t, err, v, 5)
	}
	_, err = c.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: items, Version: 3})
	if !strings.Contains(err.Error(), "older pinned snapshots: 1") {
		t.Fatalf("message %q does not name the older pinned snapshot", err)
	}
	if got := readAll(t, c, "shop1", items, 1, 100, true); !reflect.DeepEqual(got, v1) {
		t.Fatalf("pinned version 1 reads differently after expiry:\n got %v\nwant %v", got, v1)
	}
	if got := readAll(t, c, "shop1", items, 5, 100, false); len(got) != 5 {
		t.Fatalf("retained version 5 holds %d rows, want 5", len(got))
	}
	// The read of version 2 that started before the horizon moved goes on.
	next, err := c.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: items, Version: 2, Cursor: first.Next, Limit: 1})
	if err != nil || len(next.Rows) != 1 {
		t.Fatalf("continuing a read of version 2 within gc_grace: %+v, %v", next, err)
	}
	// Negative control: with a gc_grace that has passed, the same page is
	// refused (expiry really applies to continuing reads, bounded by grace).
	short := catalog.New(c.Conn(), catalog.Options{Prefix: "sluice", GCGrace: time.Microsecond})
	_, err = short.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: items, Version: 2, Cursor: first.Next, Limit: 1})
	expiredErr(t, err, 2, 5)

	// Pinning an expired version is refused; an unknown one is not found.
	if _, err := c.PinSnapshot(ctx, 3, ""); !errors.Is(err, catalog.ErrExpired) {
		t.Fatalf("pinning expired version 3: %v", err)
	}
	if _, err := c.PinSnapshot(ctx, 99, ""); !errors.Is(err, catalog.ErrNoSnapshot) {
		t.Fatalf("pinning unpublished version 99: %v", err)
	}

	// Paging: every retained snapshot once, the pin marked.
	var seen []uint64
	var before uint64
	for range 10 {
		page, nb, err := c.RetainedSnapshots(ctx, catalog.SnapshotPage{Before: before, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page {
			seen = append(seen, s.Version)
			if s.Pinned != (s.Version == 1) || (s.Pinned && s.PinReason != "audit 2026-Q4") {
				t.Fatalf("snapshot %d pinned=%v reason %q", s.Version, s.Pinned, s.PinReason)
			}
		}
		if nb == 0 {
			break
		}
		before = nb
	}
	slices.Sort(seen)
	if want := []uint64{1, 5, 6}; !slices.Equal(seen, want) {
		t.Fatalf("paged snapshots %v, want %v", seen, want)
	}
	all, err := c.Snapshots(ctx)
	if err != nil || len(all) != 3 || all[0].Version != 1 || all[2].Version != 6 {
		t.Fatalf("Snapshots: %+v, %v", all, err)
	}

	// Unpinning expires version 1 at once.
	if err := c.UnpinSnapshot(ctx, 1); err != nil {
		t.Fatal(err)
	}
	_, err = c.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: items, Version: 1})
	expiredErr(t, err, 1, 5)
	if err := c.UnpinSnapshot(ctx, 99); !errors.Is(err, catalog.ErrNoSnapshot) {
		t.Fatalf("unpinning unpublished version 99: %v", err)
	}
}
