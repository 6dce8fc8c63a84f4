package demo

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tables are the demo's captured tables.
var Tables = []string{"public.customers", "public.orders", "public.events"}

const schema = `
CREATE TABLE IF NOT EXISTS public.customers (
  tenant_id  text        NOT NULL,
  id         bigint      NOT NULL,
  name       text        NOT NULL,
  email      text,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);
CREATE TABLE IF NOT EXISTS public.orders (
  tenant_id   text          NOT NULL,
  id          bigint        NOT NULL,
  customer_id bigint        NOT NULL,
  status      text          NOT NULL,
  total       numeric(12,2) NOT NULL,
  items       jsonb,
  tags        text[],
  placed_at   timestamptz   NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);
CREATE TABLE IF NOT EXISTS public.events (
  id        bigserial PRIMARY KEY,
  tenant_id text        NOT NULL,
  kind      text        NOT NULL,
  payload   jsonb,
  at        timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE public.events REPLICA IDENTITY FULL;
`

// Tenant is the name of demo tenant i.
func Tenant(i int) string { return fmt.Sprintf("t%03d", i) }

// Setup creates the demo schema and seeds every tenant with a skewed number
// of customers and orders.
func Setup(ctx context.Context, pool *pgxpool.Pool, tenants int) error {
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("creating the demo schema: %w", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM public.customers`).Scan(&n); err != nil {
		return fmt.Errorf("counting demo rows: %w", err)
	}
	if n > 0 {
		return nil
	}
	_, err := pool.Exec(ctx, `
INSERT INTO public.customers (tenant_id, id, name, email)
SELECT 't' || lpad(t::text, 3, '0'), c, 'customer ' || c, 'c' || c || '@example.com'
FROM generate_series(1, $1::int) t, generate_series(1, greatest(1, 200 / t)) c`, tenants)
	if err == nil {
		_, err = pool.Exec(ctx, `
INSERT INTO public.orders (tenant_id, id, customer_id, status, total, items, tags)
SELECT tenant_id, id, id, 'placed', (id * 3.25)::numeric(12,2), jsonb_build_object('sku', 'A' || id, 'qty', 1), ARRAY['new']
FROM public.customers`)
	}
	if err != nil {
		return fmt.Errorf("seeding the demo: %w", err)
	}
	return nil
}

// Traffic runs transactions at rate per second until ctx ends.
func Traffic(ctx context.Context, pool *pgxpool.Pool, tenants int, rate float64, log *slog.Logger) error {
	if rate <= 0 {
		<-ctx.Done()
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, uint64(tenants-1))
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	var txs, failures int
	for {
		select {
		case <-ctx.Done():
			log.Info("demo traffic stopped", "transactions", txs, "failures", failures)
			return nil
		case <-tick.C:
		}
		t := Tenant(int(zipf.Uint64()) + 1)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return step(ctx, tx, rng, t, tenants) })
		if err != nil && ctx.Err() == nil {
			failures++
			if failures == 1 || failures%100 == 0 {
				log.Warn("demo transaction failed", "err", err, "failures", failures)
			}
			continue
		}
		txs++
	}
}

func step(ctx context.Context, tx pgx.Tx, rng *rand.Rand, tenant string, tenants int) error {
	switch r := rng.IntN(100); {
	case r < 40:
		_, err := tx.Exec(ctx, `
INSERT INTO public.orders (tenant_id, id, customer_id, status, total, items, tags)
SELECT $1, coalesce(max(id), 0) + 1, 1, 'placed', $2::numeric(12,2), jsonb_build_object('sku', 'B', 'qty', $3::int), ARRAY['new']
FROM public.orders WHERE tenant_id = $1`, tenant, fmt.Sprintf("%d.%02d", rng.IntN(500), rng.IntN(100)), rng.IntN(9)+1)
		return err
	case r < 65:
		_, err := tx.Exec(ctx, `
UPDATE public.orders SET status = (ARRAY['paid','shipped','delivered'])[1 + floor(random()*3)::int],
  tags = tags || 'touched'::text
WHERE tenant_id = $1 AND id = (SELECT id FROM public.orders WHERE tenant_id = $1 ORDER BY random() LIMIT 1)`, tenant)
		return err
	case r < 75:
		_, err := tx.Exec(ctx, `
DELETE FROM public.orders WHERE tenant_id = $1 AND id = (SELECT id FROM public.orders WHERE tenant_id = $1 ORDER BY random() LIMIT 1)`, tenant)
		return err
	case r < 95:
		_, err := tx.Exec(ctx, `INSERT INTO public.events (tenant_id, kind, payload) VALUES ($1, 'click', jsonb_build_object('n', $2::int))`, tenant, rng.IntN(1000))
		return err
	case r < 98:
		// A row moves between tenants: a delete in the old destination, an
		// insert in the new one.
		_, err := tx.Exec(ctx, `
UPDATE public.events SET tenant_id = $2 WHERE id = (SELECT id FROM public.events WHERE tenant_id = $1 ORDER BY id DESC LIMIT 1)`, tenant, Tenant(rng.IntN(tenants)+1))
		return err
	default:
		// The odd large transaction.
		_, err := tx.Exec(ctx, `INSERT INTO public.events (tenant_id, kind, payload)
SELECT $1, 'bulk', jsonb_build_object('i', g) FROM generate_series(1, 2000) g`, tenant)
		return err
	}
}
