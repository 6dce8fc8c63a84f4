package catalogtest

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// PublishEach writes each element of packs as one pack of table for dest
// (named p1, p2, …), indexes it and publishes a snapshot through its last
// row's LSN, under one lease (10 s), which it returns: on a fresh catalog
// version i holds the first i packs.
func PublishEach(t testing.TB, c *catalog.Catalog, store packstore.Store, table Table, dest string, packs [][]Row) catalog.Lease {
	t.Helper()
	ctx := t.Context()
	l, err := c.AcquireLease(ctx, "test", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, rows := range packs {
		m := Write(t, store, table, dest, "p"+strconv.Itoa(i+1), rows)
		ref, err := catalog.ReadRef(ctx, store, m.Path())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Index(ctx, store, []catalog.PackRef{ref}); err != nil {
			t.Fatal(err)
		}
		var through proto.LSN
		if len(rows) > 0 {
			through = proto.LSN(rows[len(rows)-1].LSN)
		}
		res, err := c.Publish(ctx, l, 10*time.Second, through)
		if err != nil {
			t.Fatal(err)
		}
		l = res.Lease
	}
	return l
}
