-- The demo schema of `sluice dev` (services/sluice/internal/demo/demo.go),
-- run once by the postgres image on an empty data directory. Keep it in step
-- with demo.go: test/ops checks that every table and column there is here.
-- The reader creates the publication and the replication slot itself.

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

-- Seed 300 tenants with a skewed number of customers and orders (as
-- demo.Setup does with demo.tenants = 300).
INSERT INTO public.customers (tenant_id, id, name, email)
SELECT 't' || lpad(t::text, 3, '0'), c, 'customer ' || c, 'c' || c || '@example.com'
FROM generate_series(1, 300) t, generate_series(1, greatest(1, 200 / t)) c;
INSERT INTO public.orders (tenant_id, id, customer_id, status, total, items, tags)
SELECT tenant_id, id, id, 'placed', (id * 3.25)::numeric(12,2), jsonb_build_object('sku', 'A' || id, 'qty', 1), ARRAY['new']
FROM public.customers;
