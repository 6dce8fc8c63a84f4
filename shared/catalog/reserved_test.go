package catalog_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// clashNames are source column names the catalog used for its own in
// schema 8 and before: the rows tables' columns (destination, store_id,
// pack_id), the inventory's and the watermark's columns that statements
// over a rows table could resolve to (version, table, path, fingerprint,
// rows, bytes), and every alias a read, the latest view or a clear read
// introduced (_w, _t<i>, _c<i>, _n<i>, _tn<i>, _op ... _pack, _m, _n).
var clashNames = []string{
	"destination", "store_id", "pack_id", "version", "table", "path", "fingerprint", "rows", "bytes", "publish_id",
	"_w", "_t0", "_t1", "_c0", "_c1", "_n", "_n0", "_tn0", "_m", "_op", "_unch", "_lsn", "_seq", "_ct", "_store", "_pack", "_part", "_row",
}

// clashTable is a table whose non-key columns take every clashName, one
// array among them (the NULL-marker path).
func clashTable() catalogtest.Table {
	t := catalogtest.Table{Name: "public.clash", PK: []string{"id"}, Routing: "tenant",
		Columns: []catalogtest.Col{{Name: "id", Kind: proto.KindInt64, PgType: "bigint"}, {Name: "tenant", Kind: proto.KindText, PgType: "text"}}}
	for _, n := range clashNames {
		t.Columns = append(t.Columns, catalogtest.Col{Name: n, Kind: proto.KindText, PgType: "text"})
	}
	t.Columns = append(t.Columns, catalogtest.Col{Name: "tags", Kind: proto.ArrayKind(proto.KindText), PgType: "text[]"})
	return t
}

func clashRow(id int64, tenant, tag string) map[string]any {
	m := map[string]any{"id": id, "tenant": tenant, "tags": []any{tag}}
	for _, n := range clashNames {
		m[n] = fmt.Sprintf("%s-%d-%s", n, id, tag)
	}
	return m
}

// TestSourceColumnsNamedLikeTheCatalogs: a source table whose columns are
// named like every column and alias the catalog used for its own
// (clashNames) is registered, indexed, published, read (with and without
// system columns, page by page, a TOAST carry-forward and a delete among
// its changes), seen through the latest view, compacted, collected and
// purged, beside an ordinary table, and reads back exactly its rows
// (docs/adr/0044-reserved-catalog-names.md). Schema 8 failed at the rows
// table's CREATE ("Column destination specified more than once").
func TestSourceColumnsNamedLikeTheCatalogs(t *testing.T) {
	for _, be := range chtest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			conn := be.Conn
			if be.Name == "chdb" {
				conn = chtest.Conn(t)
			}
			ctx := t.Context()
			c := catalog.New(conn, catalog.Options{Prefix: "sluice", GCGrace: time.Nanosecond})
			if err := c.EnsureSchema(ctx); err != nil {
				t.Fatal(err)
			}
			store := openStore(t, "s1")
			tbl := clashTable()
			upd := clashRow(2, "shopA", "new")
			upd["destination"] = nil // TOAST-unchanged: carried forward from the insert
			metas := []packstore.PackMeta{
				catalogtest.Write(t, store, tbl, "shopA", "c1", []catalogtest.Row{
					catalogtest.Ins(100, 1, clashRow(1, "shopA", "a")),
					catalogtest.Ins(100, 2, clashRow(2, "shopA", "a")),
					catalogtest.Ins(100, 3, clashRow(3, "shopA", "a")),
				}),
				catalogtest.Write(t, store, tbl, "shopA", "c2", []catalogtest.Row{
					catalogtest.Upd(101, 1, upd, "destination"),
					catalogtest.Del(101, 2, map[string]any{"id": int64(3), "tenant": "shopA"}),
				}),
				catalogtest.Write(t, store, tbl, "shopB", "c3", []catalogtest.Row{catalogtest.Ins(100, 4, clashRow(9, "shopB", "b"))}),
				catalogtest.Write(t, store, catalogtest.Items, "shopA", "i1", []catalogtest.Row{catalogtest.Ins(100, 5, item(1, "shopA", nil))}),
			}
			index(t, c, store, metas...)
			var l catalog.Lease
			lpublish(t, c, &l)
			wantA := []map[string]any{clashRow(1, "shopA", "a"), clashRow(2, "shopA", "new")}
			wantA[1]["destination"] = "destination-2-a"
			check := func(when string) {
				t.Helper()
				for _, pageSize := range []int{1, 10} {
					for _, system := range []bool{false, true} {
						got := readAll(t, c, "shopA", tbl.Name, 0, pageSize, system)
						if system {
							for _, r := range got {
								if r["_sluice_pack_id"] == nil || r["_sluice_lsn"] == nil {
									t.Fatalf("%s: system columns missing: %v", when, r)
								}
							}
							got = withoutSystem(got)
						}
						if !jsonEqualAny(got, wantA) {
							t.Fatalf("%s: shopA (page %d, system %v) reads\n %v\nwant\n %v", when, pageSize, system, got, wantA)
						}
					}
				}
				if got := readAll(t, c, "shopB", tbl.Name, 0, 10, false); !jsonEqualAny(got, []map[string]any{clashRow(9, "shopB", "b")}) {
					t.Fatalf("%s: shopB reads %v", when, got)
				}
				if got := readAll(t, c, "shopA", catalogtest.Items.Name, 0, 10, false); len(got) != 1 || got[0]["id"] != 1.0 {
					t.Fatalf("%s: the ordinary table reads %v", when, got)
				}
			}
			check("indexed")
			// The latest view names its own columns _sluice_*, the source's by their names.
			res, err := conn.Query(ctx, "SELECT _sluice_destination, id, `destination`, `store_id`, `_w` FROM `sluice_latest.public.clash` ORDER BY _sluice_destination, id")
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(res.Rows); got != "[[shopA 1 destination-1-a store_id-1-a _w-1-a] [shopA 2 destination-2-a store_id-2-new _w-2-new] [shopB 9 destination-9-b store_id-9-b _w-9-b]]" {
				t.Fatalf("latest view: %s", got)
			}
			st, l2, err := c.Compact(ctx, l, lifeTTL, store, catalog.CompactPolicy{MinPacks: 2, SmallBytes: 1 << 30, MaxBytes: 1 << 30}, "compact1")
			if err != nil {
				t.Fatal(err)
			}
			if st.Members < 2 {
				t.Fatalf("compaction did nothing: %+v", st)
			}
			l = l2
			check("compacted")
			if _, err := c.AdvanceRetention(ctx, l, catalog.RetentionPolicy{Retention: time.Microsecond, RetainMin: 1}); err != nil {
				t.Fatal(err)
			}
			if gs, err := c.CollectGarbage(ctx, store, catalog.GCOptions{}); err != nil || gs.Members == 0 {
				t.Fatalf("collecting garbage: %+v, %v", gs, err)
			}
			check("collected")
			if _, _, err := c.Purge(ctx, l, lifeTTL, store, "shopB", "purge1"); err != nil {
				t.Fatal(err)
			}
			if ps, err := c.PurgeStatus(ctx, "shopB"); err != nil || !ps.Done {
				t.Fatalf("purge left %+v, %v", ps, err)
			}
			if got := readAll(t, c, "shopA", tbl.Name, 0, 10, false); !jsonEqualAny(got, wantA) {
				t.Fatalf("after the purge of shopB, shopA reads %v", got)
			}
		})
	}
}

// withoutSystem drops the system columns of read rows.
func withoutSystem(rows []map[string]any) []map[string]any {
	for _, r := range rows {
		for k := range r {
			if strings.HasPrefix(k, proto.SystemPrefix) {
				delete(r, k)
			}
		}
	}
	return rows
}

// TestKeyColumnsWithCommasAndSpaces: a table keyed by quoted columns whose
// names hold a comma and edge spaces ("a,b", " x ") is registered with
// exactly those key columns (proto.PrimaryKey reads the key as a list) and
// reads back page by page, the newest change per key winning. Split from a
// comma-joined string, the key named columns "a", "b" and " x " and the
// pack was refused.
func TestKeyColumnsWithCommasAndSpaces(t *testing.T) {
	conn := chtest.Conn(t)
	c := newCatalog(t, conn)
	store := openStore(t, "s1")
	tbl := catalogtest.Table{Name: "public.keyed", PK: []string{"tenant", "a,b", " x "}, Routing: "tenant",
		Columns: []catalogtest.Col{{Name: "tenant", Kind: proto.KindText, PgType: "text"}, {Name: "a,b", Kind: proto.KindText, PgType: "text"},
			{Name: " x ", Kind: proto.KindInt32, PgType: "integer"}, {Name: "v", Kind: proto.KindText, PgType: "text"}}}
	row := func(ab string, x int32, v string) map[string]any {
		return map[string]any{"tenant": "shopA", "a,b": ab, " x ": x, "v": v}
	}
	m := catalogtest.Write(t, store, tbl, "shopA", "k1", []catalogtest.Row{
		catalogtest.Ins(100, 1, row("k,1", 1, "one")),
		catalogtest.Ins(100, 2, row("k,1", 2, "two")),
		catalogtest.Ins(100, 3, row("k,2", 1, "three")),
		catalogtest.Upd(101, 1, row("k,1", 2, "two'")),
		catalogtest.Del(101, 2, map[string]any{"tenant": "shopA", "a,b": "k,2", " x ": int32(1)}),
	})
	index(t, c, store, m)
	ti, err := c.Table(t.Context(), tbl.Name)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%q", ti.PrimaryKey) != `["tenant" "a,b" " x "]` {
		t.Fatalf("registered key %q", ti.PrimaryKey)
	}
	var l catalog.Lease
	lpublish(t, c, &l)
	got := readAll(t, c, "shopA", tbl.Name, 0, 1, false)
	want := []map[string]any{row("k,1", 1, "one"), row("k,1", 2, "two'")}
	if !jsonEqualAny(got, want) {
		t.Fatalf("read\n %v\nwant\n %v", got, want)
	}
}

// TestEngineRefusalIsTheTables: a rows table DDL the engine refuses (a
// column named _row_exists or _block_number, names MergeTree reserves;
// such a column added to a registered table later) is a
// catalog.TableRefusedError, permanent (ErrBadSchema) and naming the table
// and the engine's reason, and registers nothing: the same table without
// the column registers after it (the control), as does the ordinary table.
// A failure that may pass on retry (the connection gone) is not a refusal.
func TestEngineRefusalIsTheTables(t *testing.T) {
	conn := chtest.Conn(t)
	c := newCatalog(t, conn)
	ctx := t.Context()
	info := func(name, fp string, cols ...string) catalog.TableInfo {
		tbl := catalogtest.Table{Name: name, PK: []string{"id"}, Routing: "tenant",
			Columns: []catalogtest.Col{{Name: "id", Kind: proto.KindInt64, PgType: "bigint"}, {Name: "tenant", Kind: proto.KindText, PgType: "text"}}}
		for _, col := range cols {
			tbl.Columns = append(tbl.Columns, catalogtest.Col{Name: col, Kind: proto.KindText, PgType: "text"})
		}
		ti, err := catalog.TableInfoFromSchema(name, tbl.Schema(), fp)
		if err != nil {
			t.Fatal(err)
		}
		return ti
	}
	for _, col := range []string{"_row_exists", "_block_number"} {
		_, err := c.Register(ctx, info("public.refused", "fp-"+col, "v", col))
		var tr *catalog.TableRefusedError
		if !errors.As(err, &tr) || !errors.Is(err, catalog.ErrBadSchema) || tr.Table != "public.refused" || !strings.Contains(err.Error(), col) {
			t.Fatalf("a column %s: %v, want a TableRefusedError of public.refused naming it", col, err)
		}
	}
	if _, err := c.Table(ctx, "public.refused"); !errors.Is(err, catalog.ErrUnknownTable) {
		t.Fatalf("a refused table was registered: %v", err)
	}
	// Control: without the column the table registers; then the column
	// added later (ALTER ... ADD COLUMN) is refused the same way.
	if _, err := c.Register(ctx, info("public.refused", "fp-ok", "v")); err != nil {
		t.Fatalf("control: %v", err)
	}
	_, err := c.Register(ctx, info("public.refused", "fp-added", "v", "_row_exists"))
	var tr *catalog.TableRefusedError
	if !errors.As(err, &tr) || tr.Fingerprint != "fp-added" {
		t.Fatalf("a refused column added later: %v", err)
	}
	if _, err := c.Register(ctx, info("public.plain", "fp-plain", "destination", "store_id")); err != nil {
		t.Fatalf("the ordinary table: %v", err)
	}
	closed := chtest.Conn(t)
	c2 := newCatalog(t, closed)
	closed.Close()
	if _, err := c2.Register(ctx, info("public.other", "fp-x", "v")); err == nil || errors.As(err, &tr) || errors.Is(err, catalog.ErrBadSchema) {
		t.Fatalf("a closed connection: %v, want a retryable error", err)
	}
}
