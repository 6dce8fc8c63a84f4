package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

const ttl = 10 * time.Second

func openStore(t testing.TB, id string) *packstore.DirStore {
	t.Helper()
	s, err := packstore.OpenDir(t.TempDir(), id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newCatalog(t testing.TB, conn catalog.Conn) *catalog.Catalog {
	t.Helper()
	c := catalog.New(conn, catalog.Options{Prefix: "sluice"})
	if err := c.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c
}

func index(t testing.TB, c *catalog.Catalog, store packstore.Store, metas ...packstore.PackMeta) catalog.IndexStats {
	t.Helper()
	var refs []catalog.PackRef
	for _, m := range metas {
		ref, err := catalog.ReadRef(t.Context(), store, m.Path())
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	st, err := c.Index(t.Context(), store, refs)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func publish(t testing.TB, c *catalog.Catalog, l *catalog.Lease, through proto.LSN) catalog.Snapshot {
	t.Helper()
	if l.LeaseID == "" {
		var err error
		*l, err = c.AcquireLease(t.Context(), "test", ttl)
		if err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Publish(t.Context(), *l, ttl, through)
	if err != nil {
		t.Fatal(err)
	}
	*l = res.Lease
	return res.Snapshot
}

// readAll reads every page of dest's table at version, pageSize rows a page.
func readAll(t testing.TB, c *catalog.Catalog, dest, table string, version uint64, pageSize int, system bool) []map[string]any {
	t.Helper()
	var out []map[string]any
	cur := ""
	for {
		p, err := c.Read(t.Context(), catalog.ReadRequest{Destination: dest, Table: table, Version: version, Cursor: cur, Limit: pageSize, SystemColumns: system})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rows {
			var m map[string]any
			if err := json.Unmarshal(r, &m); err != nil {
				t.Fatalf("row %s: %v", r, err)
			}
			out = append(out, m)
		}
		if p.Next == "" {
			return out
		}
		cur = p.Next
	}
}

func item(id int64, tenant string, extra map[string]any) map[string]any {
	m := map[string]any{"id": id, "tenant": tenant, "name": fmt.Sprintf("item-%d", id), "qty": int32(id), "price": "12345678901234567890.123456789",
		"ratio": 0.5, "ok": true, "at": int64(1700000000123456), "local": int64(-1), "day": int32(19000),
		"tags": []any{"a", nil, "c"}, "doc": `{"a": 1}`, "raw": []byte{0, 1, 0xff}, "big": strings.Repeat("x", 50)}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func TestIndexPublishRead(t *testing.T) {
	for _, be := range chtest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := t.Context()
			c := newCatalog(t, be.Conn)
			store := openStore(t, "s1")
			p1 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p1", []catalogtest.Row{
				catalogtest.Ins(100, 1, item(1, "shop1", nil)),
				catalogtest.Ins(100, 2, item(2, "shop1", nil)),
				catalogtest.Ins(100, 3, item(3, "shop1", nil)),
				// same key twice in one pack: the newer wins, TOAST filled from the older
				catalogtest.Upd(101, 1, item(3, "shop1", map[string]any{"name": "three", "big": nil}), "big"),
			})
			p2 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "p2", []catalogtest.Row{
				catalogtest.Upd(102, 1, item(1, "shop1", map[string]any{"qty": int32(42), "big": nil, "tags": nil}), "big", "tags"),
				catalogtest.Del(102, 2, map[string]any{"id": int64(2), "tenant": "shop1"}),
			})
			other := catalogtest.Write(t, store, catalogtest.Items, "shop2", "p3", []catalogtest.Row{
				catalogtest.Ins(100, 4, item(9, "shop2", nil)),
			})
			st := index(t, c, store, p1, p2, other)
			if st.Packs != 3 || st.Rows != 7 {
				t.Fatalf("index stats %+v", st)
			}
			if _, err := c.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: catalogtest.Items.Name}); !errors.Is(err, catalog.ErrNoSnapshot) {
				t.Fatalf("read before publish: %v", err)
			}
			var l catalog.Lease
			s1 := publish(t, c, &l, 0x1000)
			if s1.Packs != 3 || s1.NewPacks != 3 || s1.ThroughLSN != 0x1000 {
				t.Fatalf("snapshot %+v", s1)
			}
			rows := readAll(t, c, "shop1", catalogtest.Items.Name, 0, 1, false)
			if len(rows) != 2 {
				t.Fatalf("got %d rows: %v", len(rows), rows)
			}
			if rows[0]["id"] != 1.0 || rows[0]["qty"] != 42.0 || rows[0]["big"] != strings.Repeat("x", 50) {
				t.Errorf("row 1: %v", rows[0])
			}
			if !reflect.DeepEqual(rows[0]["tags"], []any{"a", nil, "c"}) {
				t.Errorf("row 1 tags (TOAST-unchanged array) = %v", rows[0]["tags"])
			}
			if rows[1]["id"] != 3.0 || rows[1]["name"] != "three" || rows[1]["big"] != strings.Repeat("x", 50) {
				t.Errorf("row 3: %v", rows[1])
			}
			want := `{"id":3,"tenant":"shop1","name":"three","qty":3,"price":12345678901234567890.123456789,"ratio":0.5,"ok":true,"at":"2023-11-14T22:13:20.123456+00:00","local":"1969-12-31T23:59:59.999999","day":"2022-01-08","tags":["a",null,"c"],"doc":{"a": 1},"raw":"\\x0001ff","big":"` + strings.Repeat("x", 50) + `"}`
			p, err := c.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: catalogtest.Items.Name, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if got := string(p.Rows[1]); !jsonEqual(got, want) {
				t.Errorf("row 3 JSON\n got %s\nwant %s", got, want)
			}
			if rows := readAll(t, c, "shop2", catalogtest.Items.Name, 0, 10, true); len(rows) != 1 || rows[0]["_sluice_pack_id"] != "p3" {
				t.Errorf("shop2: %v", rows)
			}

			// Re-indexing changes no read.
			before := readAll(t, c, "shop1", catalogtest.Items.Name, s1.Version, 1000, true)
			refs := []catalog.PackRef{}
			for _, m := range []packstore.PackMeta{p1, p2} {
				ref, _ := catalog.ReadRef(ctx, store, m.Path())
				refs = append(refs, ref)
			}
			if err := be.Conn.Exec(ctx, "INSERT INTO `sluice_rows.public.items` SELECT * FROM `sluice_rows.public.items` WHERE _sluice_pack_id = 'p1'"); err != nil {
				t.Fatal(err)
			}
			if st, err := c.Index(ctx, store, refs); err != nil || st.Skipped != 2 {
				t.Fatalf("re-index: %+v %v", st, err)
			}
			if after := readAll(t, c, "shop1", catalogtest.Items.Name, s1.Version, 1000, true); !reflect.DeepEqual(before, after) {
				t.Errorf("re-indexing changed the read:\n%v\n%v", before, after)
			}

			// The same pack in a second store: two rows survive OPTIMIZE FINAL, reads resolve one.
			store2 := openStore(t, "s2")
			data, err := store.Get(ctx, p1.Path())
			if err != nil {
				t.Fatal(err)
			}
			if err := store2.Put(ctx, p1.Path(), data); err != nil {
				t.Fatal(err)
			}
			index(t, c, store2, p1)
			s2 := publish(t, c, &l, 0x1000)
			if err := be.Conn.Exec(ctx, "OPTIMIZE TABLE `sluice_rows.public.items` FINAL"); err != nil {
				t.Fatal(err)
			}
			res, err := be.Conn.Query(ctx, "SELECT _sluice_store_id, count() FROM `sluice_rows.public.items` WHERE _sluice_destination = 'shop1' AND id = 3 GROUP BY _sluice_store_id ORDER BY _sluice_store_id")
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(res.Rows) != "[[s1 2] [s2 2]]" {
				t.Errorf("rows of key 3 after OPTIMIZE FINAL per store: %v", res.Rows)
			}
			if after := readAll(t, c, "shop1", catalogtest.Items.Name, s2.Version, 1000, false); len(after) != 2 || !jsonEqualAny(after, readAll(t, c, "shop1", catalogtest.Items.Name, s1.Version, 1000, false)) {
				t.Errorf("copy changed the read: %v", after)
			}
			if s2.ThroughLSN != 0x1000 {
				t.Errorf("through %v", s2.ThroughLSN)
			}
		})
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func jsonEqualAny(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

var _ = context.Background

func mustInfo(t testing.TB) catalog.TableInfo {
	ti, err := catalog.TableInfoFromSchema(catalogtest.Items.Name, catalogtest.Items.Schema(), "fp1")
	if err != nil {
		t.Fatal(err)
	}
	return ti
}

// TestNullAndEmptyArrays: a NULL array reads back as null and an empty one
// as [] (ClickHouse arrays cannot be NULL; the pack's _sluice_nulls markers
// keep the difference), also when a later TOAST-unchanged update carries the
// value forward, and when packs with and without markers are indexed in one
// call.
func TestNullAndEmptyArrays(t *testing.T) {
	for _, be := range chtest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := newCatalog(t, be.Conn)
			store := openStore(t, "s1")
			tags := func(id int64, v any) map[string]any { return item(id, "shop1", map[string]any{"tags": v}) }
			p1 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "n1", []catalogtest.Row{
				catalogtest.Ins(100, 1, tags(1, nil)),        // NULL
				catalogtest.Ins(100, 2, tags(2, []any{})),    // empty
				catalogtest.Ins(100, 3, tags(3, []any{"x"})), // set, then NULL
				catalogtest.Ins(100, 4, tags(4, nil)),        // NULL, then empty
				catalogtest.Ins(100, 5, tags(5, []any{})),    // empty, then unchanged twice
				// NULL then TOAST-unchanged in one pack
				catalogtest.Ins(100, 6, tags(6, nil)),
				catalogtest.Upd(100, 7, tags(6, nil), "tags"),
			})
			// TOAST-unchanged updates of 1, 2 and 5; 3 set to NULL.
			p2 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "n2", []catalogtest.Row{
				catalogtest.Upd(101, 1, item(1, "shop1", map[string]any{"name": "one", "tags": nil}), "tags"),
				catalogtest.Upd(101, 2, item(2, "shop1", map[string]any{"name": "two", "tags": nil}), "tags"),
				catalogtest.Upd(101, 3, tags(3, nil)),
				catalogtest.Upd(101, 4, item(5, "shop1", map[string]any{"name": "five", "tags": nil}), "tags"),
			})
			// No NULL array at all: this pack has no marker column.
			p3 := catalogtest.Write(t, store, catalogtest.Items, "shop1", "n3", []catalogtest.Row{
				catalogtest.Upd(102, 1, tags(4, []any{})),
				catalogtest.Upd(102, 2, item(5, "shop1", map[string]any{"name": "five again", "big": nil, "tags": []any{}}), "big"),
			})
			for _, m := range []packstore.PackMeta{p1, p2, p3} {
				data, err := store.Get(t.Context(), m.Path())
				if err != nil {
					t.Fatal(err)
				}
				_, sc, err := packstore.ReadPackMeta(data)
				if err != nil {
					t.Fatal(err)
				}
				if has, want := len(sc.FieldIndices(proto.ColNulls)) == 1, m.PackID != "n3"; has != want {
					t.Fatalf("pack %s: marker column present = %v, want %v", m.PackID, has, want)
				}
			}
			// The marker-less pack first: its structure must not be used for the others.
			index(t, c, store, p3, p1, p2)
			var l catalog.Lease
			s := publish(t, c, &l, 0)
			want := map[float64]string{1: "null", 2: "[]", 3: "null", 4: "[]", 5: "[]", 6: "null"}
			wantName := map[float64]string{1: "one", 2: "two", 5: "five again"}
			for _, size := range []int{1000, 2} { // one page, and pages that split the keys
				rows := readAll(t, c, "shop1", catalogtest.Items.Name, s.Version, size, false)
				if len(rows) != len(want) {
					t.Fatalf("page size %d: %d rows: %v", size, len(rows), rows)
				}
				for _, r := range rows {
					id := r["id"].(float64)
					got, _ := json.Marshal(r["tags"])
					if string(got) != want[id] {
						t.Errorf("page size %d: id %v: tags = %s, want %s", size, id, got, want[id])
					}
					if n, ok := wantName[id]; ok && r["name"] != n {
						t.Errorf("page size %d: id %v: name = %v, want %s", size, id, r["name"], n)
					}
					if id == 5 && r["big"] != strings.Repeat("x", 50) {
						t.Errorf("id 5: TOAST-unchanged big = %v", r["big"])
					}
				}
			}
			// The latest view agrees: NULL arrays are [] there (a view has no
			// marker), but the rows are the same.
			res, err := be.Conn.Query(t.Context(), "SELECT id FROM `sluice_latest.public.items` WHERE _sluice_destination = 'shop1' ORDER BY id")
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(res.Rows) != "[[1] [2] [3] [4] [5] [6]]" {
				t.Errorf("latest view ids: %v", res.Rows)
			}
		})
	}
}
