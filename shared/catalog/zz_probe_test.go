package catalog_test

import (
	"context"
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
}

func (t *timedConn) rec(q string, d time.Duration) {
	if !t.on {
		return
	}
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
	r, _ := c.Conn().Query(t.Context(), "SELECT table, count() FROM system.parts WHERE database = currentDatabase() and active GROUP BY table")
	t.Log(r.Rows)
	for k, v := range tc.log {
		if len(k) > 90 { k = k[:90] }
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		t.Logf("%6.2fms %6.2fms n=%d %s", float64(v[len(v)/2].Microseconds())/1000, float64(v[len(v)-1].Microseconds())/1000, len(v), k)
	}
}
