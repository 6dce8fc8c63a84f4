package workload_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/workload"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func small(seed uint64) workload.Options {
	return workload.Options{Seed: seed, Tenants: 60, Workers: 3, Transactions: 240, InitialRows: 300,
		LargeEvery: 40, LargeRows: 400, DocBytes: 8 << 10}
}

func run(t *testing.T, o workload.Options) (*pgxpool.Pool, workload.Stats) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := workload.Run(ctx, pool, o)
	if err != nil {
		t.Fatalf("running the workload: %v", err)
	}
	return pool, st
}

// contents is a digest of every table's rows.
func contents(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ts := range workload.Tables() {
		var h string
		err := pool.QueryRow(context.Background(), `SELECT coalesce(md5(string_agg(to_jsonb(x)::text, E'\n' ORDER BY to_jsonb(x)::text)), '') FROM `+ts.Name+` x`).Scan(&h)
		if err != nil {
			t.Fatal(err)
		}
		out[ts.Name] = h
	}
	return out
}

// TestReproducible: the same seed issues the same statements and leaves the
// same rows, whatever the interleaving of the workers; another seed does not.
func TestReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	p1, s1 := run(t, small(7))
	p2, s2 := run(t, small(7))
	p3, s3 := run(t, small(8))
	if s1.Retries+s2.Retries+s3.Retries != 0 {
		t.Fatalf("unexpected retries: %v / %v / %v", s1, s2, s3)
	}
	if s1.Digest != s2.Digest {
		t.Errorf("same seed, different statements: %s vs %s", s1.Digest, s2.Digest)
	}
	if s1.Digest == s3.Digest {
		t.Errorf("different seeds, same statements: %s", s1.Digest)
	}
	c1, c2, c3 := contents(t, p1), contents(t, p2), contents(t, p3)
	for table, h := range c1 {
		if c2[table] != h {
			t.Errorf("%s: same seed, different contents", table)
		}
		if c3[table] == h {
			t.Errorf("%s: different seeds, same contents", table)
		}
	}
	t.Logf("seed 7: %v", s1)
}

// TestFeatures: one run has every feature the issue asks for.
func TestFeatures(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	o := small(1)
	o.Mix = workload.DefaultMix
	o.Mix.MoveToast = 50
	pool, st := run(t, o)
	ctx := context.Background()
	if st.Moves == 0 || st.Reinserts == 0 || st.Deletes == 0 || st.Updates == 0 || st.LargeTransactions == 0 || !st.ColumnAdded {
		t.Errorf("a feature is missing: %v", st)
	}
	for _, ts := range workload.Tables() {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+ts.Name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("%s is empty", ts.Name)
		}
	}
	// Skew: the biggest tenant is much bigger than the median one.
	rows, err := pool.Query(ctx, `SELECT count(*) FROM public.wl_orders GROUP BY tenant_id`)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for rows.Next() {
		var n int
		_ = rows.Scan(&n)
		sizes = append(sizes, n)
	}
	sort.Ints(sizes)
	if len(sizes) < 20 || sizes[len(sizes)-1] < 5*sizes[len(sizes)/2] {
		t.Errorf("tenant sizes are not skewed: %v", sizes)
	}
	// Tenants that need the destination encoding are used.
	var encoded int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT tenant_id) FROM public.wl_orders WHERE tenant_id !~ '^[A-Za-z0-9_-]+$'`).Scan(&encoded); err != nil {
		t.Fatal(err)
	}
	if encoded == 0 {
		t.Error("no tenant with an encoded destination name")
	}
	// The added column is there and used.
	var prio int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM public.wl_orders WHERE `+workload.AddedColumn+` IS NOT NULL`).Scan(&prio); err != nil {
		t.Fatal(err)
	}
	if prio == 0 {
		t.Error("the added column is never set")
	}
	// Bodies live out of line (TOAST).
	var toast int64
	if err := pool.QueryRow(ctx, `SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = 'public.wl_docs'::regclass`).Scan(&toast); err != nil {
		t.Fatal(err)
	}
	if toast == 0 {
		t.Error("wl_docs has nothing in its TOAST table")
	}
	// The wide table holds edge values.
	var nan, inf int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE c_num = 'NaN'), count(*) FILTER (WHERE c_tstz = 'infinity' OR c_date = 'infinity') FROM public.wl_wide`).Scan(&nan, &inf); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v; tenant sizes max %d median %d; NaN numerics %d, infinities %d", st, sizes[len(sizes)-1], sizes[len(sizes)/2], nan, inf)
}

// TestDuration: a duration-bounded, rate-limited run stops on time and adds
// the column halfway.
func TestDuration(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	o := small(3)
	o.Transactions = 0
	o.Duration = 2 * time.Second
	o.Rate = 100
	_, st := run(t, o)
	if st.Elapsed > 4*time.Second || st.Transactions < 100 || st.Transactions > 260 || !st.ColumnAdded {
		t.Errorf("duration run: %v", st)
	}
}

func TestTenantNames(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		n := workload.TenantName(i)
		if seen[n] || strings.TrimSpace(n) == "" {
			t.Fatalf("tenant %d: %q repeats or is blank", i, n)
		}
		seen[n] = true
	}
}

// TestManyTenants: Populate gives every wl_events tenant a row, and
// Touched names every tenant whose wl_events rows the run changed (the
// oracle reads those and only a sample of the rest).
func TestManyTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	o := small(5)
	o.ManyTenants = 2000
	o.Mix = workload.DefaultMix
	o.Mix.MoveToast = 50
	g, err := workload.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := workload.Schema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := g.Populate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	perTenant := func() map[string]string {
		rows, err := pool.Query(ctx, `SELECT tenant_id, md5(string_agg(to_jsonb(x)::text, E'\n' ORDER BY id)) FROM public.wl_events x GROUP BY tenant_id`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		return out
	}
	before := perTenant()
	if len(before) != o.ManyTenants {
		t.Fatalf("wl_events holds %d tenants after Populate, want %d", len(before), o.ManyTenants)
	}
	if n := len(g.Touched(workload.Events)); n != 0 {
		t.Errorf("Touched lists %d tenants before any Run", n)
	}
	st, err := g.Run(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	after := perTenant()
	touched := map[string]bool{}
	for _, k := range g.Touched(workload.Events) {
		touched[k] = true
	}
	changed := 0
	for _, k := range g.ManyTenants() {
		if before[k] != after[k] {
			changed++
			if !touched[k] {
				t.Errorf("tenant %q changed in wl_events but Touched does not list it", k)
			}
		}
	}
	var toasted int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE length(payload) > 2000) FROM public.wl_events`).Scan(&toasted); err != nil {
		t.Fatal(err)
	}
	if changed == 0 || toasted == 0 || st.Moves == 0 {
		t.Errorf("wl_events: %d tenants changed, %d TOASTed payloads, %d moves", changed, toasted, st.Moves)
	}
	t.Logf("%v; wl_events: %d of %d tenants changed, %d touched, %d TOASTed payloads", st, changed, o.ManyTenants, len(touched), toasted)
}
