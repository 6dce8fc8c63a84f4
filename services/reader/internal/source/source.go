package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice/proto"
)

// Querier is the normal (non-replication) connection source needs.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Table is a validated source table.
type Table struct {
	Name     string   // schema.table
	OID      uint32   // relation id, as pgoutput names it
	Key      []string // replica identity key columns, in key order
	Routing  string   // routing column
	Identity byte     // pg_class.relreplident: d, n, f, i
	Columns  []string // live columns in attnum order
	// ColumnNums are the columns' attnums (ColumnNums[i] is Columns[i]'s):
	// a column dropped and added again under its name gets a new one.
	ColumnNums []int16
	// Partitions are a partitioned table's leaf partitions (relation ids,
	// ascending; none for a plain table): ATTACH and DETACH PARTITION add
	// and remove rows with nothing in the WAL.
	Partitions []uint32
	EstRows    int64 // pg_class.reltuples (estimate; -1 unknown)
	// Generated are the stored generated columns: pgoutput does not send
	// them (Postgres 18 can, and CheckGeneratedNotPublished refuses it), so
	// the reader computes them.
	Generated []Generated
}

// IdentityFull reports whether the table is REPLICA IDENTITY FULL.
func (t Table) IdentityFull() bool { return t.Identity == 'f' }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSource, fmt.Sprintf(format, args...))
}

// CheckWALLevel refuses a source without wal_level = logical.
func CheckWALLevel(ctx context.Context, q Querier) error {
	var lvl string
	if err := q.QueryRow(ctx, "SHOW wal_level").Scan(&lvl); err != nil {
		return fmt.Errorf("reading wal_level: %w", err)
	}
	if lvl != "logical" {
		return invalid("wal_level is %q, logical replication needs logical: run ALTER SYSTEM SET wal_level = logical; then restart Postgres", lvl)
	}
	return nil
}

// Describe validates one configured table and describes it.
func Describe(ctx context.Context, q Querier, name, routing string) (Table, error) {
	schema, rel, _ := strings.Cut(name, ".")
	t := Table{Name: name, Routing: routing}
	var ident string
	var reltuples float32
	var oid int64
	err := q.QueryRow(ctx, `SELECT c.oid::int8, c.relreplident::text, c.reltuples
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r','p')`, schema, rel).Scan(&oid, &ident, &reltuples)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, invalid("table %s does not exist: create it, or remove it from source.tables", name)
	}
	if err != nil {
		return t, fmt.Errorf("describing table %s: %w", name, err)
	}
	t.OID = uint32(oid)
	t.Identity = ident[0]
	t.EstRows = int64(reltuples)

	rows, err := q.Query(ctx, `SELECT attname, attnum FROM pg_catalog.pg_attribute
		WHERE attrelid = $1::oid AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, oid)
	if err != nil {
		return t, fmt.Errorf("listing columns of %s: %w", name, err)
	}
	var name1 string
	var num int16
	_, err = pgx.ForEachRow(rows, []any{&name1, &num}, func() error {
		t.Columns, t.ColumnNums = append(t.Columns, name1), append(t.ColumnNums, num)
		return nil
	})
	if err != nil {
		return t, fmt.Errorf("listing columns of %s: %w", name, err)
	}
	parts, err := LeafPartitions(ctx, q, []uint32{t.OID})
	if err != nil {
		return t, fmt.Errorf("listing partitions of %s: %w", name, err)
	}
	t.Partitions = parts[t.OID]
	for _, c := range t.Columns {
		if proto.IsSystemColumn(c) {
			return t, invalid("table %s has a column named %s: names starting with %s are reserved for sluice; rename it (ALTER TABLE %s RENAME COLUMN %s TO ...)", name, c, proto.SystemPrefix, name, c)
		}
	}

	// The replica identity key: the primary key (default), the replica
	// identity index (USING INDEX), and for FULL the primary key if any.
	keySQL := `SELECT a.attname FROM pg_catalog.pg_index i
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = $1::oid AND ` + map[bool]string{true: "i.indisreplident", false: "i.indisprimary"}[t.Identity == 'i'] + `
		ORDER BY k.ord`
	rows, err = q.Query(ctx, keySQL, oid)
	if err != nil {
		return t, fmt.Errorf("reading the key of %s: %w", name, err)
	}
	t.Key, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return t, fmt.Errorf("reading the key of %s: %w", name, err)
	}
	if t.Identity == 'n' {
		return t, invalid("table %s has REPLICA IDENTITY NOTHING: updates and deletes would carry no key; run ALTER TABLE %s REPLICA IDENTITY DEFAULT; (with a primary key) or ALTER TABLE %s REPLICA IDENTITY FULL;", name, name, name)
	}
	if len(t.Key) == 0 {
		return t, invalid("table %s has no primary key and no replica identity index: add one, e.g. ALTER TABLE %s ADD PRIMARY KEY (id); or ALTER TABLE %s REPLICA IDENTITY USING INDEX <a unique index on NOT NULL columns>;", name, name, name)
	}
	if !slices.Contains(t.Columns, routing) {
		return t, invalid("table %s has no routing column %q: add the column, or set source.routing_columns.%s to the column that names the tenant", name, routing, name)
	}
	t.Generated, err = DescribeGenerated(ctx, q, t.OID)
	if err != nil {
		return t, fmt.Errorf("listing generated columns of %s: %w", name, err)
	}
	for _, g := range t.Generated {
		if g.Name == routing || slices.Contains(t.Key, g.Name) {
			return t, invalid("table %s: %s is a generated column in the key or the routing column, which sluice cannot read from the replication stream", name, g.Name)
		}
		if err := g.CheckComputable(t.IdentityFull()); err != nil {
			return t, invalid("table %s: %v: run ALTER TABLE %s REPLICA IDENTITY FULL;", name, err, name)
		}
	}
	if !t.IdentityFull() && !slices.Contains(t.Key, routing) {
		return t, invalid("table %s: routing column %s is not part of the replica identity (%s), so a DELETE would carry no tenant: run ALTER TABLE %s REPLICA IDENTITY FULL;", name, routing, strings.Join(t.Key, ", "), name)
	}
	return t, nil
}

// Slot is what pg_replication_slots says about a slot.
type Slot struct {
	Exists         bool
	Plugin         string
	Active         bool
	ActivePID      int32 // the walsender streaming it, when Active
	ConfirmedFlush proto.LSN
	RestartLSN     proto.LSN
}

// LookupSlot reads the slot; a slot of another plugin or database is
// refused.
func LookupSlot(ctx context.Context, q Querier, name string) (Slot, error) {
	var s Slot
	var plugin, db *string
	var confirmed, restart *string
	var pid *int32
	err := q.QueryRow(ctx, `SELECT plugin, database, active, active_pid, confirmed_flush_lsn::text, restart_lsn::text
		FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, name).Scan(&plugin, &db, &s.Active, &pid, &confirmed, &restart)
	if pid != nil {
		s.ActivePID = *pid
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("looking up replication slot %s: %w", name, err)
	}
	s.Exists = true
	var cur string
	if err := q.QueryRow(ctx, "SELECT current_database()").Scan(&cur); err != nil {
		return s, fmt.Errorf("reading current database: %w", err)
	}
	if plugin == nil || *plugin != "pgoutput" || db == nil || *db != cur {
		return s, invalid("replication slot %s exists but is not a pgoutput slot of database %s: drop it (SELECT pg_drop_replication_slot('%s');) or set source.slot to another name", name, cur, name)
	}
	s.Plugin = *plugin
	if confirmed != nil {
		l, err := proto.ParseLSN(*confirmed)
		if err != nil {
			return s, err
		}
		s.ConfirmedFlush = l
	}
	if restart != nil {
		l, err := proto.ParseLSN(*restart)
		if err != nil {
			return s, err
		}
		s.RestartLSN = l
	}
	return s, nil
}
