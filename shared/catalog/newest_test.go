package catalog_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// TestNewest: Newest answers what the first row of a one-snapshot page of
// RetainedSnapshots does (the newest snapshot, its pin and reason), before
// and after the newest version is pinned and unpinned, and ErrNoSnapshot
// before anything is published.
func TestNewest(t *testing.T) {
	ctx := t.Context()
	empty := catalog.New(chtest.Conn(t), catalog.Options{})
	if err := empty.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := empty.Newest(ctx); !errors.Is(err, catalog.ErrNoSnapshot) {
		t.Fatalf("Newest before any publish: %v, want ErrNoSnapshot", err)
	}

	c, _ := retentionFixture(t, catalog.Options{})
	same := func(step string) catalog.Snapshot {
		t.Helper()
		got, err := c.Newest(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		page, _, err := c.RetainedSnapshots(ctx, catalog.SnapshotPage{Limit: 1})
		if err != nil || len(page) != 1 {
			t.Fatalf("%s: RetainedSnapshots: %v, %d rows", step, err, len(page))
		}
		if !reflect.DeepEqual(got, page[0]) {
			t.Fatalf("%s: Newest %+v, RetainedSnapshots' newest %+v", step, got, page[0])
		}
		return got
	}
	s := same("unpinned")
	if s.Version != 6 || s.Pinned {
		t.Fatalf("newest %+v: want version 6, not pinned", s)
	}
	if _, err := c.PinSnapshot(ctx, 6, "release 6"); err != nil {
		t.Fatal(err)
	}
	if s := same("pinned"); !s.Pinned || s.PinReason != "release 6" {
		t.Fatalf("newest after its pin %+v: want pinned, reason release 6", s)
	}
	if err := c.UnpinSnapshot(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if s := same("unpinned again"); s.Pinned {
		t.Fatalf("newest after its unpin %+v: want not pinned", s)
	}
}
