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
			if err := be.Conn.Exec(ctx, "INSERT INTO `sluice_rows.public.items` SELECT * FROM `sluice_rows.public.items` WHERE pack_id = 'p1'"); err != nil {
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
			res, err := be.Conn.Query(ctx, "SELECT store_id, count() FROM `sluice_rows.public.items` WHERE destination = 'shop1' AND id = 3 GROUP BY store_id ORDER BY store_id")
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
