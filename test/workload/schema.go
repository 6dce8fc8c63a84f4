package workload

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TableSpec describes one workload table as sluice sees it.
type TableSpec struct {
	Name    string   // schema.table
	Keys    []string // primary key columns, in key order
	Routing string   // routing column (names the tenant)
}

// The workload's tables.
const (
	Orders   = "public.wl_orders"
	Accounts = "public.wl_accounts"
	Wide     = "public.wl_wide"
	Docs     = "public.wl_docs"
	// Events is the table whose rows spread over Options.ManyTenants
	// tenants (10,000 in the e2e tests), uniformly, with a TOASTed payload
	// on every 2nd row, a move-heavy operation mix (EventsMix).
	Events = "public.wl_events"
)

// AddedColumn is the column Run adds to Orders mid-run.
const AddedColumn = "priority"

// Tables lists the workload's tables.
func Tables() []TableSpec {
	return []TableSpec{
		{Name: Orders, Keys: []string{"tenant_id", "id"}, Routing: "tenant_id"},
		{Name: Accounts, Keys: []string{"id"}, Routing: "org_id"},
		{Name: Wide, Keys: []string{"tenant_id", "id"}, Routing: "tenant_id"},
		{Name: Docs, Keys: []string{"tenant_id", "id"}, Routing: "tenant_id"},
		{Name: Events, Keys: []string{"tenant_id", "id"}, Routing: "tenant_id"},
	}
}

// TableNames lists the tables' schema.table names (source.tables).
func TableNames() []string {
	var out []string
	for _, t := range Tables() {
		out = append(out, t.Name)
	}
	return out
}

// RoutingColumns maps each table whose routing column is not tenant_id to
// its column (source.routing_columns).
func RoutingColumns() map[string]string {
	out := map[string]string{}
	for _, t := range Tables() {
		if t.Routing != "tenant_id" {
			out[t.Name] = t.Routing
		}
	}
	return out
}

const ddl = `
DO $$ BEGIN
  CREATE TYPE public.wl_mood AS ENUM ('sad', 'ok', 'happy', 'ecstatic', 'it''s "complicated"');
EXCEPTION WHEN duplicate_object THEN NULL; END $$;
DO $$ BEGIN
  CREATE TYPE public.wl_pair AS (a integer, b text, c integer[], d double precision, t timestamptz);
EXCEPTION WHEN duplicate_object THEN NULL; END $$;
CREATE TABLE IF NOT EXISTS public.wl_orders (
  tenant_id   text          NOT NULL,
  id          bigint        NOT NULL,
  customer_id bigint        NOT NULL,
  status      text          NOT NULL,
  total       numeric(14,2) NOT NULL,
  tags        text[],
  note        text,
  placed_at   timestamptz   NOT NULL,
  PRIMARY KEY (tenant_id, id)
);
CREATE TABLE IF NOT EXISTS public.wl_accounts (
  id      bigint  PRIMARY KEY,
  org_id  text    NOT NULL,
  name    text    NOT NULL,
  balance numeric NOT NULL,
  active  boolean NOT NULL,
  opened  date,
  meta    jsonb
);
ALTER TABLE public.wl_accounts REPLICA IDENTITY FULL;
CREATE TABLE IF NOT EXISTS public.wl_wide (
  tenant_id    text NOT NULL,
  id           bigint NOT NULL,
  c_int2       smallint,
  c_int4       integer,
  c_int8       bigint,
  c_num        numeric,
  c_num_fixed  numeric(40,20),
  c_float4     real,
  c_float8     double precision,
  c_bool       boolean,
  c_text       text,
  c_varchar    varchar(40),
  c_char       char(8),
  c_uuid       uuid,
  c_tstz       timestamptz,
  c_ts         timestamp,
  c_date       date,
  c_time       time,
  c_interval   interval,
  c_json       json,
  c_jsonb      jsonb,
  c_bytea      bytea,
  c_enum       public.wl_mood,
  c_inet       inet,
  c_int2_arr   smallint[],
  c_int4_arr   integer[],
  c_int8_arr   bigint[],
  c_num_arr    numeric[],
  c_float4_arr real[],
  c_float8_arr double precision[],
  c_bool_arr   boolean[],
  c_text_arr   text[],
  c_uuid_arr   uuid[],
  c_tstz_arr   timestamptz[],
  c_ts_arr     timestamp[],
  c_date_arr   date[],
  c_time_arr   time[],
  c_intvl_arr  interval[],
  c_json_arr   json[],
  c_jsonb_arr  jsonb[],
  c_bytea_arr  bytea[],
  c_enum_arr   public.wl_mood[],
  c_pair       public.wl_pair,
  c_pair_arr   public.wl_pair[],
  c_int4_2d    integer[][],
  c_box_arr    box[],
  PRIMARY KEY (tenant_id, id)
);
CREATE TABLE IF NOT EXISTS public.wl_docs (
  tenant_id text    NOT NULL,
  id        bigint  NOT NULL,
  title     text    NOT NULL,
  version   integer NOT NULL,
  body      text,
  PRIMARY KEY (tenant_id, id)
);
ALTER TABLE public.wl_docs ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE IF NOT EXISTS public.wl_events (
  tenant_id text    NOT NULL,
  id        bigint  NOT NULL,
  kind      text    NOT NULL,
  n         integer NOT NULL,
  payload   text,
  PRIMARY KEY (tenant_id, id)
);
ALTER TABLE public.wl_events ALTER COLUMN payload SET STORAGE EXTERNAL;
`

// Schema creates the workload's type and tables (idempotent).
func Schema(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("creating the workload schema: %w", err)
	}
	return nil
}
