package catalog_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// TestTypeChangeOpensGeneration: a column whose kind changes (qty integer
// becomes text at the source; the reader halts the table and a resync
// copies it again under the new schema, ending with a clear below the
// copy) opens the table's next generation, a rows table of its own. The
// snapshot before the change reads the integers, pinned through a
// compaction, expiry and GC of the newer generation's members; the ones
// after it read the re-copied rows with text values only, also from a new
// Catalog over the same engine (the generation is in the registry).
// Negative control: reading every version with the latest registration
// sends the pinned read to the new generation's rows table, where its
// members' rows are not.
func TestTypeChangeOpensGeneration(t *testing.T) {
	for _, latest := range []bool{false, true} {
		t.Run(fmt.Sprintf("latestRegistration=%v", latest), func(t *testing.T) {
			err := typeChangeOpensGeneration(t, latest)
			switch {
			case !latest && err != nil:
				t.Error(err)
			case latest && err == nil:
				t.Error("negative control: reading with the latest registration passed too; the test cannot catch it")
			case latest:
				t.Logf("negative control caught: %v", err)
			}
		})
	}
}

func typeChangeOpensGeneration(t *testing.T, latest bool) error {
	ctx := t.Context()
	conn := chtest.Conn(t)
	c := catalog.New(conn, catalog.Options{Prefix: "sluice", GCGrace: time.Millisecond})
	if err := c.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	catalog.SetLatestRegistration(c, latest)
	store := openStore(t, "s1")
	var l catalog.Lease
	text := catalogtest.Items
	text.Columns = append([]catalogtest.Col{}, text.Columns...)
	for i, col := range text.Columns {
		if col.Name == "qty" {
			text.Columns[i] = catalogtest.Col{Name: "qty", Kind: proto.KindText, PgType: "text"}
		}
	}
	m1 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{
		catalogtest.Ins(10, 1, item(1, "shop1", nil)), catalogtest.Ins(10, 2, item(2, "shop1", nil)), catalogtest.Ins(10, 3, item(3, "shop1", nil))})
	index(t, c, store, m1)
	v1 := publish(t, c, &l, 10).Version
	if _, err := c.PinSnapshot(ctx, v1, "before the type change"); err != nil {
		t.Fatal(err)
	}
	want1 := readAll(t, c, "shop1", catalogtest.Items.Name, v1, 100, false)
	if len(want1) != 3 || want1[0]["qty"] != float64(1) {
		t.Fatalf("version %d before the change: %v", v1, want1)
	}
	// The resync: keys 1 and 2 copied again (3 was deleted while the table
	// was halted), then the end clear below the copy's first position.
	copyRows := []catalogtest.Row{
		catalogtest.Ins(20, 1, item(1, "shop1", map[string]any{"qty": "one"})),
		catalogtest.Ins(20, 2, item(2, "shop1", map[string]any{"qty": "two"})),
	}
	m2 := catalogtest.Write(t, store, text, "shop1", "p2", copyRows)
	m3 := catalogtest.Write(t, store, text, "shop1", "p3", []catalogtest.Row{catalogtest.Clear(20, 0, map[string]any{"tenant": "shop1"})})
	m4 := catalogtest.Write(t, store, text, "shop1", "p4", []catalogtest.Row{catalogtest.Upd(30, 1, item(2, "shop1", map[string]any{"qty": "deux"}))})
	index(t, c, store, m2, m3)
	v2 := publish(t, c, &l, 20).Version
	index(t, c, store, m4)
	v3 := publish(t, c, &l, 30).Version
	ti, err := c.Table(ctx, catalogtest.Items.Name)
	if err != nil {
		t.Fatal(err)
	}
	if ti.Generation != 2 {
		t.Fatalf("after the type change the table is at generation %d, want 2", ti.Generation)
	}
	for _, rt := range []string{"sluice_rows.public.items", "sluice_rows.public.items@2"} {
		res, err := conn.Query(ctx, "SELECT toString(type) FROM system.columns WHERE database = currentDatabase() AND table = '"+rt+"' AND name = 'qty'")
		if err != nil || len(res.Rows) != 1 {
			t.Fatalf("rows table %s: %v %v", rt, res.Rows, err)
		}
	}
	qtys := func(rows []map[string]any) []any {
		var out []any
		for _, r := range rows {
			out = append(out, r["qty"])
		}
		return out
	}
	check := func(c *catalog.Catalog, when string) error {
		if got := readAll(t, c, "shop1", catalogtest.Items.Name, v1, 100, false); !reflect.DeepEqual(got, want1) {
			return fmt.Errorf("%s: pinned version %d reads %v, want %v", when, v1, qtys(got), qtys(want1))
		}
		if got := qtys(readAll(t, c, "shop1", catalogtest.Items.Name, v2, 100, false)); !reflect.DeepEqual(got, []any{"one", "two"}) {
			return fmt.Errorf("%s: version %d reads qty %v, want [one two]", when, v2, got)
		}
		if got := qtys(readAll(t, c, "shop1", catalogtest.Items.Name, v3, 100, false)); !reflect.DeepEqual(got, []any{"one", "deux"}) {
			return fmt.Errorf("%s: version %d reads qty %v, want [one deux]", when, v3, got)
		}
		return nil
	}
	if err := check(c, "after the change"); err != nil {
		return err
	}
	// A new Catalog reads the generations from the registry.
	c2 := catalog.New(conn, catalog.Options{Prefix: "sluice", GCGrace: time.Millisecond})
	if err := c2.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	catalog.SetLatestRegistration(c2, latest)
	if err := check(c2, "a new catalog"); err != nil {
		return err
	}
	// Compaction of the new generation, expiry of everything unpinned and GC
	// keep the pinned read and the latest one.
	if _, l2, err := c.Compact(ctx, l, lifeTTL, store, policy, "compact1"); err != nil {
		t.Fatal(err)
	} else {
		l = l2
	}
	for range 3 {
		lpublish(t, c, &l)
	}
	if _, err := c.AdvanceRetention(ctx, l, catalog.RetentionPolicy{Retention: time.Microsecond, RetainMin: 1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if _, err := c.CollectGarbage(ctx, store, catalog.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, c, "shop1", catalogtest.Items.Name, v1, 100, false); !reflect.DeepEqual(got, want1) {
		return fmt.Errorf("after compaction and GC: pinned version %d reads %v, want %v", v1, qtys(got), qtys(want1))
	}
	if got := qtys(readAll(t, c, "shop1", catalogtest.Items.Name, 0, 100, false)); !reflect.DeepEqual(got, []any{"one", "deux"}) {
		return fmt.Errorf("after compaction and GC: the latest version reads qty %v, want [one deux]", got)
	}
	return nil
}
