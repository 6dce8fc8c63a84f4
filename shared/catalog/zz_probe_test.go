package catalog_test

import (
	"context"
	"os"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

type timedConn struct {
	catalog.Conn
	on  bool
	log map[string][]time.Duration
	last []string
}

func (t *timedConn) rec(q string, d time.Duration) {
	if !t.on {
		return
	}
	t.last = append(t.last, q)
	k := strings.Join(strings.Fields(q), " ")
	if len(k) > 30 {
		k = k[:30]
	}
	t.log[k] = append(t.log[k], d)
}
func (t *timedConn) Exec(ctx context.Context, q string) error {
	t0 := time.Now()
	err := t.Conn.Exec(ctx, q)
	t.rec(q, time.Since(t0))
	return err
}
func (t *timedConn) Query(ctx context.Context, q string) (*catalog.Result, error) {
	t0 := time.Now()
	r, err := t.Conn.Query(ctx, q)
	t.rec(q, time.Since(t0))
	return r, err
}

func TestProbePublish(t *testing.T) {
	tc := &timedConn{Conn: chtest.Conn(t), log: map[string][]time.Duration{}}
	c := newCatalog(t, tc)
	store := openStore(t, "s1")
	var metas []packstore.PackMeta
	for i := range 20 {
		metas = append(metas, catalogtest.Write(t, store, catalogtest.Items, "shop1", fmt.Sprintf("p%d", i), benchRows("shop1", i, 1, uint64(i+1))))
	}
	l, _ := c.AcquireLease(t.Context(), "bench", time.Minute)
	for i := range 20 {
		index(t, c, store, metas[i])
		tc.on = true
		res, err := c.Publish(t.Context(), l, time.Minute, 0)
		tc.on = false
		if err != nil {
			t.Fatal(err)
		}
		l = res.Lease
	}
	fence := "(SELECT toUInt8(lease_id = 'x' AND expires_at > toUnixTimestamp64Micro(now64(6)) AND (SELECT count() FROM sluice_watermark WHERE version >= 30) = 0 AND (SELECT groupArray(claim_id) FROM sluice_version_claims WHERE version = 30) = ['x']) FROM (SELECT lease_id, expires_at FROM sluice_publisher_lease ORDER BY term DESC, lease_id DESC LIMIT 1)) = 1"
	members := "(store_id, pack_id) NOT IN (SELECT store_id, pack_id FROM sluice_manifest WHERE (version, publish_id) IN (SELECT version, publish_id FROM sluice_watermark))"
	qs := []string{
		"SELECT 1",
		"SELECT " + fence,
		"SELECT store_id, pack_id, any(destination), any(table) FROM sluice_packs WHERE " + members + " GROUP BY store_id, pack_id",
		"SELECT store_id, pack_id, any(destination), any(table) FROM sluice_packs WHERE " + members + " AND " + fence + " GROUP BY store_id, pack_id",
		"SELECT store_id, pack_id FROM sluice_packs",
		"SELECT store_id, pack_id FROM sluice_packs LEFT ANTI JOIN (SELECT store_id, pack_id FROM sluice_manifest WHERE (version, publish_id) IN (SELECT version, publish_id FROM sluice_watermark)) AS m USING (store_id, pack_id)",
		"SELECT count() FROM sluice_manifest WHERE version = 5 AND publish_id = 'x'",
		"SELECT ifNull(max(through_lsn), 0) FROM sluice_watermark",
	}
	ds := make([][]time.Duration, len(qs))
	for range 30 {
		for i, q := range qs {
			t0 := time.Now()
			if _, err := c.Conn().Query(t.Context(), q); err != nil {
				t.Fatal(q, err)
			}
			ds[i] = append(ds[i], time.Since(t0))
		}
	}
	for i, q := range qs {
		d := ds[i]
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		if len(q) > 100 { q = q[:40] + "..." + q[len(q)-50:] }
		t.Logf("%6.2fms min %6.2fms  %s", float64(d[len(d)/2].Microseconds())/1000, float64(d[0].Microseconds())/1000, q)
	}
	r, _ := c.Conn().Query(t.Context(), "SELECT table, count() FROM system.parts WHERE database = currentDatabase() and active GROUP BY table")
	t.Log(r.Rows)
	for k, v := range tc.log {
		if len(k) > 90 { k = k[:90] }
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		t.Logf("%6.2fms %6.2fms n=%d %s", float64(v[len(v)/2].Microseconds())/1000, float64(v[len(v)-1].Microseconds())/1000, len(v), k)
	}
}

func TestProbeIndex(t *testing.T) {
	tc := &timedConn{Conn: chtest.Conn(t), log: map[string][]time.Duration{}}
	c := newCatalog(t, tc)
	store := openStore(t, "s1")
	const packRows, perBatch = 10000, 5
	var refs [][]catalog.PackRef
	for i := range 6 {
		var batch []catalog.PackRef
		for j := range perBatch {
			m := catalogtest.Write(t, store, catalogtest.Items, "shop1", fmt.Sprintf("p%d-%d", i, j), benchRows("shop1", (i*perBatch+j)*packRows, packRows, uint64(i+1)))
			ref, err := catalog.ReadRef(t.Context(), store, m.Path())
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, ref)
		}
		refs = append(refs, batch)
	}
	tc.on = true
	sets := []string{""}
	tot := make([]time.Duration, len(sets))
	for i := range 6 {
		for j, st := range sets {
			c.Conn().Exec(t.Context(), "TRUNCATE TABLE sluice_packs")
			os.Setenv("SLUICE_PROBE_SETTINGS", st)
			t0 := time.Now()
			if _, err := c.Index(t.Context(), store, refs[i]); err != nil {
				t.Fatal(err)
			}
			tot[j] += time.Since(t0)
		}
	}
	for j, st := range sets {
		t.Logf("rows/s %.0f %s", float64(6*packRows*perBatch)/tot[j].Seconds(), st)
	}
	tc.on = false
	for k, v := range tc.log {
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		t.Logf("%6.2fms %6.2fms n=%d %s", float64(v[len(v)/2].Microseconds())/1000, float64(v[len(v)-1].Microseconds())/1000, len(v), k)
	}
	p := store.TableFunction(refs[0][0].Path)
	for _, q := range []string{
		"SELECT count() FROM " + p,
		"SELECT sum(length(name)) FROM " + p,
		"SELECT * FROM " + p + " FORMAT Null",
	} {
		t0 := time.Now()
		err := tc.Exec(t.Context(), q)
		t.Log(time.Since(t0), err, q)
	}
}

func TestProbeRead(t *testing.T) {
	tc := &timedConn{Conn: chtest.Conn(t), log: map[string][]time.Duration{}}
	c := newCatalog(t, tc)
	store := openStore(t, "s1")
	var metas []packstore.PackMeta
	for _, d := range []string{"shop1", "shop2"} {
		for j := range 10 {
			metas = append(metas, catalogtest.Write(t, store, catalogtest.Items, d, fmt.Sprintf("%s-%d", d, j), benchRows(d, j*10000, 10000, 1)))
		}
	}
	metas = append(metas, catalogtest.Write(t, store, catalogtest.Items, "shop1", "upd", benchRows("shop1", 0, 10000, 2)))
	index(t, c, store, metas...)
	var l catalog.Lease
	s := publish(t, c, &l, 0)
	first, err := c.Read(t.Context(), catalog.ReadRequest{Destination: "shop1", Table: catalogtest.Items.Name, Version: s.Version, Limit: 50000})
	if err != nil {
		t.Fatal(err)
	}
	tc.on = true
	var all []time.Duration
	for range 20 {
		t0 := time.Now()
		p, err := c.Read(t.Context(), catalog.ReadRequest{Destination: "shop1", Table: catalogtest.Items.Name, Version: s.Version, Cursor: first.Next, Limit: 1000})
		all = append(all, time.Since(t0))
		if err != nil || len(p.Rows) != 1000 {
			t.Fatal(err, len(p.Rows))
		}
	}
	tc.on = false
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	t.Logf("read p50 %v", all[len(all)/2])
	kq, rq := tc.last[len(tc.last)-2], tc.last[len(tc.last)-1]
	kq2 := strings.Replace(kq, "SELECT DISTINCT", "SELECT", 1)
	kq2 = strings.Replace(kq2, " LIMIT 1000", " LIMIT 1 BY `id` LIMIT 1000", 1)
	_ = kq
	memb := rq[strings.Index(rq, "(store_id, pack_id) IN"):strings.Index(rq, "AND (`id`) >")]
	i0 := strings.Index(rq, " AND (`id`) <= (")
	i1 := strings.Index(rq[i0:], "))") + i0 + 2
	rqD := rq[:i0] + rq[i1:]
	wi := strings.Index(rq, " FROM `sluice_rows.public.items` WHERE ")
	wj := strings.Index(rq, " GROUP BY ")
	where := rq[wi+len(" FROM `sluice_rows.public.items` WHERE ") : wj]
	rqU := strings.ReplaceAll(rq, "(_sluice_lsn, _sluice_seq)", "bitOr(bitShiftLeft(toUInt128(_sluice_lsn), 64), toUInt128(_sluice_seq))")
	qs := []string{
		rq,
		"EXPLAIN " + rq,
		"EXPLAIN SELECT destination, id, argMax(tuple(*), (_sluice_lsn, _sluice_seq)) FROM `sluice_rows.public.items` WHERE " + where + " GROUP BY destination, id",
		rqU,
		rq + " SETTINGS compile_aggregate_expressions = 0",
		rq + " SETTINGS compile_expressions = 0, compile_aggregate_expressions = 0",
		rq + " SETTINGS query_plan_enable_optimizations = 0",
	}
	t.Log(where, len(rqD), len(memb), len(kq2))
	ds := make([][]time.Duration, len(qs)*2)
	for range 15 {
		for i, q := range qs {
			t0 := time.Now()
			if err := c.Conn().Exec(t.Context(), q); err != nil {
				t.Fatal(q, err)
			}
			ds[2*i] = append(ds[2*i], time.Since(t0))
			t0 = time.Now()
			if _, err := c.Conn().Query(t.Context(), q); err != nil {
				t.Fatal(q, err)
			}
			ds[2*i+1] = append(ds[2*i+1], time.Since(t0))
		}
	}
	for i, q := range qs {
		for j := range 2 {
			d := ds[2*i+j]
			sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
			if len(q) > 100 { q = q[:40] + "..." + q[len(q)-50:] }
			t.Logf("%d %6.2fms min %6.2fms  %s", j, float64(d[len(d)/2].Microseconds())/1000, float64(d[0].Microseconds())/1000, q)
		}
	}
	for k, v := range tc.log {
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		t.Logf("%6.2fms %6.2fms n=%d %s", float64(v[len(v)/2].Microseconds())/1000, float64(v[len(v)-1].Microseconds())/1000, len(v), k)
	}
}
