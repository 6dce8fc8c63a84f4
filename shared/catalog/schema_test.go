package catalog_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// populated returns a catalog holding one published pack.
func populated(t *testing.T, conn catalog.Conn) *catalog.Catalog {
	c := newCatalog(t, conn)
	store := openStore(t, "s1")
	m := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{catalogtest.Ins(1, 1, item(1, "shop1", nil))})
	index(t, c, store, m)
	var l catalog.Lease
	publish(t, c, &l, 1)
	return c
}

func TestSchemaRefusals(t *testing.T) {
	cases := []struct {
		name   string
		damage []string // statements run on a populated catalog
		want   string   // in the refusal
	}{
		{"other stamp version", []string{"INSERT INTO sluice_schema_version VALUES (99, 0)"}, "stamped with schema version [9 99]"},
		{"future stamp only", []string{"TRUNCATE TABLE sluice_schema_version", "INSERT INTO sluice_schema_version VALUES (10, 0)"}, "stamped with schema version [10]"},
		// Version 8 named the rows tables' own columns destination,
		// store_id and pack_id, which a source table's columns could take
		// (docs/adr/0044-reserved-catalog-names.md).
		{"version 8 stamp", []string{"TRUNCATE TABLE sluice_schema_version", "INSERT INTO sluice_schema_version VALUES (8, 0)"}, "stamped with schema version [8]"},
		// Version 7 had no table generations: its registry rows name no
		// generation, and one rows table held every schema of a table.
		{"version 7 stamp", []string{"TRUNCATE TABLE sluice_schema_version", "INSERT INTO sluice_schema_version VALUES (7, 0)"}, "stamped with schema version [7]"},
		// Version 6 listed each snapshot's members in its watermark row and
		// kept the inventory a ReplacingMergeTree, whose merges may move a
		// member above the high-water that admitted it.
		{"version 6 stamp", []string{"TRUNCATE TABLE sluice_schema_version", "INSERT INTO sluice_schema_version VALUES (6, 0)"}, "stamped with schema version [6]"},
		// Version 5 had no expiry horizon and no pins.
		{"version 5 stamp", []string{"TRUNCATE TABLE sluice_schema_version", "INSERT INTO sluice_schema_version VALUES (5, 0)"}, "stamped with schema version [5]"},
		// Version 4 kept one inventory row per pack, ordered by (store_id,
		// pack_id): a segment's destinations would fold onto one row.
		{"version 4 stamp", []string{"TRUNCATE TABLE sluice_schema_version", "INSERT INTO sluice_schema_version VALUES (4, 0)"}, "stamped with schema version [4]"},
		// Version 3 admitted packs to a publish by a clock window (no
		// inventory block numbers); version 2 kept the membership in a
		// manifest table written by its own statement; version 1 also kept
		// the lease and the version claims in MergeTree tables.
		{"version 3 stamp", []string{"TRUNCATE TABLE sluice_schema_version", "INSERT INTO sluice_schema_version VALUES (3, 0)"}, "stamped with schema version [3]"},
		{"previous stamp", []string{"TRUNCATE TABLE sluice_schema_version", "INSERT INTO sluice_schema_version VALUES (2, 0)"}, "stamped with schema version [2]"},
		{"older stamp", []string{"TRUNCATE TABLE sluice_schema_version", "INSERT INTO sluice_schema_version VALUES (1, 0)"}, "stamped with schema version [1]"},
		{"unstamped but not empty", []string{"TRUNCATE TABLE sluice_schema_version"}, "carries no schema stamp"},
		{"no stamp table", []string{"DROP TABLE sluice_schema_version"}, "carries no schema stamp (sluice_schema_version is absent)"},
		{"lacks a table", []string{"DROP TABLE sluice_publisher_lease"}, "lacks sluice_publisher_lease"},
		{"lacks the pins", []string{"DROP TABLE sluice_snapshot_pins"}, "lacks sluice_snapshot_pins"},
		{"lacks a rows table", []string{"DROP VIEW `sluice_latest.public.items`", "DROP TABLE `sluice_rows.public.items`"}, "rows tables are missing: sluice_rows.public.items"},
		// The membership is the inventory rows at or below the snapshots'
		// high-water: lose the high-water (as a catalog whose inventory was
		// recreated would: its blocks start again above none of them).
		{"inventory without membership", []string{"ALTER TABLE sluice_watermark UPDATE inventory_block = 0 WHERE 1 SETTINGS mutations_sync = 2"}, "inventory without membership"},
		{"inventory without rows", []string{"TRUNCATE TABLE `sluice_rows.public.items`"}, "inventory without rows"},
	}
	for _, be := range chtest.Backends(t) {
		for _, tc := range cases {
			t.Run(be.Name+"/"+tc.name, func(t *testing.T) {
				conn := be.Conn
				if be.Name == "chdb" {
					conn = chtest.Conn(t) // a fresh database per case
				} else {
					for _, b := range chtest.Backends(t) {
						if b.Name == be.Name {
							conn = b.Conn
						}
					}
				}
				populated(t, conn)
				for _, q := range tc.damage {
					if err := conn.Exec(t.Context(), q); err != nil {
						t.Fatal(err)
					}
				}
				objsBefore := objects(t, conn)
				err := catalog.New(conn, catalog.Options{}).EnsureSchema(t.Context())
				if !errors.Is(err, catalog.ErrSchemaRefused) {
					t.Fatalf("EnsureSchema = %v, want a refusal", err)
				}
				msg := err.Error()
				if !strings.Contains(msg, tc.want) || !strings.Contains(msg, "sluice catalog rebuild") {
					t.Errorf("refusal does not say %q and name the rebuild: %s", tc.want, msg)
				}
				if after := objects(t, conn); !reflect.DeepEqual(objsBefore, after) {
					t.Errorf("refusal ran DDL: %v -> %v", objsBefore, after)
				}
			})
		}
	}
}

func objects(t *testing.T, conn catalog.Conn) []string {
	res, err := conn.Query(t.Context(), "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range res.Rows {
		out = append(out, r[0].(string))
	}
	return out
}

func TestSchemaAccepts(t *testing.T) {
	conn := chtest.Conn(t)
	// Fresh, then idempotent.
	populated(t, conn)
	if err := catalog.New(conn, catalog.Options{}).EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	// An install that stopped before stamping, over empty tables, is repaired.
	conn2 := chtest.Conn(t)
	newCatalog(t, conn2)
	if err := conn2.Exec(t.Context(), "DROP TABLE sluice_schema_version"); err != nil {
		t.Fatal(err)
	}
	if err := catalog.New(conn2, catalog.Options{}).EnsureSchema(t.Context()); err != nil {
		t.Fatalf("interrupted fresh install: %v", err)
	}
	// Another prefix beside it is a separate catalog.
	if err := catalog.New(conn, catalog.Options{Prefix: "other"}).EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A crash between indexing and the next publish, after a first
	// publish of no packs (an empty source): packs indexed, no snapshot
	// holds any yet. Nothing pinned reads empty; the catalog is whole.
	conn3 := chtest.Conn(t)
	c3 := newCatalog(t, conn3)
	var l catalog.Lease
	publish(t, c3, &l, 1)
	store := openStore(t, "s1")
	index(t, c3, store, catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{catalogtest.Ins(2, 1, item(1, "shop1", nil))}))
	if err := catalog.New(conn3, catalog.Options{}).EnsureSchema(t.Context()); err != nil {
		t.Fatalf("indexed packs after an empty first snapshot: %v", err)
	}
}

func TestAddedColumnAndRebuild(t *testing.T) {
	ctx := t.Context()
	for _, be := range chtest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := newCatalog(t, be.Conn)
			store := openStore(t, "s1")
			var l catalog.Lease
			m1 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{
				catalogtest.Ins(1, 1, item(1, "shop1", nil)),
				catalogtest.Ins(1, 2, item(2, "shop1", map[string]any{
					"at": int64(-62135596800000000), "local": int64(253402300799999999), "day": int32(-719162),
				})),
				catalogtest.Ins(1, 3, item(3, "shop1", map[string]any{"day": int32(2932896), "at": int64(253402300799999999), "price": "NaN", "ratio": -0.0})),
			})
			wider := catalogtest.Items
			wider.Columns = append(append([]catalogtest.Col{}, wider.Columns...), catalogtest.Col{Name: "added", Kind: "int16", PgType: "smallint"})
			m2 := catalogtest.Write(t, store, wider, "shop1", "p2", []catalogtest.Row{
				catalogtest.Upd(2, 1, item(1, "shop1", map[string]any{"added": int16(7), "big": nil}), "big"),
			})
			m3 := catalogtest.Write(t, store, catalogtest.Items, "shop2", "p3", []catalogtest.Row{catalogtest.Ins(1, 4, item(5, "shop2", nil))})
			index(t, c, store, m1, m2, m3)
			publish(t, c, &l, 2)
			ti, err := c.Table(ctx, catalogtest.Items.Name)
			if err != nil || len(ti.Columns) != len(catalogtest.Items.Columns)+1 {
				t.Fatalf("table after added column: %+v %v", ti, err)
			}
			rows := readAll(t, c, "shop1", catalogtest.Items.Name, 0, 1000, false)
			if len(rows) != 3 || rows[0]["added"] != 7.0 || rows[1]["added"] != nil || rows[0]["big"] == nil {
				t.Fatalf("rows: %v", rows)
			}
			if rows[1]["at"] != "0001-01-01T00:00:00+00:00" || rows[1]["local"] != "9999-12-31T23:59:59.999999" || rows[1]["day"] != "0001-01-01" {
				t.Errorf("year 1 / 9999 values: at=%v local=%v day=%v", rows[1]["at"], rows[1]["local"], rows[1]["day"])
			}
			if rows[2]["day"] != "9999-12-31" || rows[2]["at"] != "9999-12-31T23:59:59.999999+00:00" || rows[2]["price"] != "NaN" {
				t.Errorf("year 9999 values: day=%v at=%v price=%v", rows[2]["day"], rows[2]["at"], rows[2]["price"])
			}
			before := map[string]any{}
			dests, err := c.Destinations(ctx, 0)
			if err != nil || !reflect.DeepEqual(dests, map[string][]string{catalogtest.Items.Name: {"shop1", "shop2"}}) {
				t.Fatalf("destinations %v %v", dests, err)
			}
			for _, d := range dests[catalogtest.Items.Name] {
				before[d] = readAll(t, c, d, catalogtest.Items.Name, 0, 2, false)
			}
			st, err := catalog.Rebuild(ctx, be.Conn, store, catalog.Options{})
			if err != nil || st.Packs != 3 {
				t.Fatalf("rebuild: %+v %v", st, err)
			}
			c2 := newCatalog(t, be.Conn)
			for d, want := range before {
				if got := readAll(t, c2, d, catalogtest.Items.Name, 0, 2, false); !reflect.DeepEqual(got, want) {
					t.Errorf("after rebuild %s:\n got %v\nwant %v", d, got, want)
				}
			}
		})
	}
}
