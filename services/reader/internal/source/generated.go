package source

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Generated is a stored generated column. pgoutput does not send its value
// (Postgres 18 can; CheckGeneratedNotPublished refuses it); Postgres requires its expression to be immutable, so
// the reader evaluates Expr on the change's own values (Inputs), which is
// exact and needs no read of the table.
type Generated struct {
	Name    string
	TypeOID uint32
	TypMod  int32
	Expr    string  // pg_get_expr of the generation expression: column references unqualified
	Inputs  []Input // the columns Expr references (pg_depend), in attnum order
}

// Input is a column a generation expression references.
type Input struct {
	Name      string
	Type      string // format_type(atttypid, atttypmod)
	Toastable bool   // a varlena that may be stored out of line: an update leaving it unchanged does not send it
}

// DescribeGenerated lists the stored generated columns of relation oid with
// their expressions and the columns each references.
func DescribeGenerated(ctx context.Context, q Querier, oid uint32) ([]Generated, error) {
	// The columns an expression references are its dependencies on columns
	// of the same table: Postgres 15 and later record them on the
	// pg_attrdef row, 14 on the generated column itself (pg_class, the
	// column's attnum as objsubid). Both are read, so either works.
	rows, err := q.Query(ctx, `SELECT a.attname, a.atttypid::int8, a.atttypmod, pg_catalog.pg_get_expr(d.adbin, d.adrelid),
			COALESCE(dep.names, '{}'), COALESCE(dep.types, '{}'), COALESCE(dep.toast, '{}')
		FROM pg_catalog.pg_attribute a
		JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		LEFT JOIN LATERAL (
			SELECT array_agg(r.attname::text ORDER BY r.attnum) AS names,
				array_agg(pg_catalog.format_type(r.atttypid, r.atttypmod) ORDER BY r.attnum) AS types,
				array_agg(r.attlen = -1 AND r.attstorage <> 'p' ORDER BY r.attnum) AS toast
			FROM pg_catalog.pg_attribute r
			WHERE r.attrelid = d.adrelid AND r.attnum > 0 AND r.attnum <> d.adnum AND EXISTS (
				SELECT 1 FROM pg_catalog.pg_depend dp
				WHERE dp.refclassid = 'pg_catalog.pg_class'::regclass AND dp.refobjid = d.adrelid AND dp.refobjsubid = r.attnum
					AND (dp.classid = 'pg_catalog.pg_attrdef'::regclass AND dp.objid = d.oid
						OR dp.classid = 'pg_catalog.pg_class'::regclass AND dp.objid = d.adrelid AND dp.objsubid = d.adnum))) dep ON true
		WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = 's'
		ORDER BY a.attnum`, int64(oid))
	if err != nil {
		return nil, fmt.Errorf("listing generated columns of relation %d: %w", oid, err)
	}
	gens, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Generated, error) {
		var g Generated
		var typ int64
		var names, types []string
		var toast []bool
		if err := r.Scan(&g.Name, &typ, &g.TypMod, &g.Expr, &names, &types, &toast); err != nil {
			return g, err
		}
		g.TypeOID = uint32(typ)
		if len(types) != len(names) || len(toast) != len(names) {
			return g, fmt.Errorf("generated column %s: inconsistent dependency lists", g.Name)
		}
		for i, n := range names {
			g.Inputs = append(g.Inputs, Input{Name: n, Type: types[i], Toastable: toast[i]})
		}
		return g, nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing generated columns of relation %d: %w", oid, err)
	}
	return gens, nil
}

// CheckComputable refuses a generated column the reader cannot always
// compute from a change: one that reads a TOASTable column and another
// column, on a table without REPLICA IDENTITY FULL. An update that changes
// the other column and leaves the TOASTed one unchanged sends no value for
// it, and no read of the table can give the value as of the change. (One
// that reads only unchanged columns is unchanged itself: immutable.)
func (g Generated) CheckComputable(identityFull bool) error {
	if identityFull || len(g.Inputs) < 2 {
		return nil
	}
	for _, in := range g.Inputs {
		if in.Toastable {
			return fmt.Errorf("generated column %s reads %s, which Postgres may store out of line and then does not send on an update that leaves it unchanged, together with other columns, so its value cannot be computed from such an update", g.Name, in.Name)
		}
	}
	return nil
}

// GeneratedSQL is the statement that evaluates gens on one row's values:
// its parameters are the text forms (or NULL) of inputs, in that order, and
// it returns one text column per generated column. The expressions reference
// columns by name, so the values are bound under the columns' quoted names
// and types.
func GeneratedSQL(gens []Generated) (sql string, inputs []string) {
	var sel, from strings.Builder
	seen := map[string]bool{}
	for i, g := range gens {
		if i > 0 {
			sel.WriteString(", ")
		}
		sel.WriteString("(" + g.Expr + ")::text")
		for _, in := range g.Inputs {
			if seen[in.Name] {
				continue
			}
			seen[in.Name] = true
			if len(inputs) > 0 {
				from.WriteString(", ")
			}
			inputs = append(inputs, in.Name)
			from.WriteString("$" + strconv.Itoa(len(inputs)) + "::text::" + in.Type + " AS " + pgx.Identifier{in.Name}.Sanitize())
		}
	}
	return "SELECT " + sel.String() + " FROM (SELECT " + from.String() + ") AS _sluice_row", inputs
}

// ColumnNums returns the attnum of each live column of relation oid (none
// when it is gone): a column dropped and added again under its name has a
// new one, which no Relation message shows when it was the last column.
func ColumnNums(ctx context.Context, q Querier, oid uint32) (map[string]int16, error) {
	rows, err := q.Query(ctx, `SELECT attname, attnum FROM pg_catalog.pg_attribute
		WHERE attrelid = $1::oid AND attnum > 0 AND NOT attisdropped`, int64(oid))
	if err != nil {
		return nil, fmt.Errorf("reading the column numbers of relation %d: %w", oid, err)
	}
	out := map[string]int16{}
	var name string
	var num int16
	if _, err := pgx.ForEachRow(rows, []any{&name, &num}, func() error { out[name] = num; return nil }); err != nil {
		return nil, fmt.Errorf("reading the column numbers of relation %d: %w", oid, err)
	}
	return out, nil
}

// LeafPartitions returns, for each partitioned table of oids, its leaf
// partitions (ascending relation ids); plain tables have none.
func LeafPartitions(ctx context.Context, q Querier, oids []uint32) (map[uint32][]uint32, error) {
	ids := make([]int64, len(oids))
	for i, o := range oids {
		ids[i] = int64(o)
	}
	rows, err := q.Query(ctx, `SELECT r.oid::int8, p.relid::oid::int8
		FROM pg_catalog.pg_class r, LATERAL pg_catalog.pg_partition_tree(r.oid) p
		WHERE r.oid = ANY($1::oid[]) AND r.relkind = 'p' AND p.isleaf ORDER BY 1, 2`, ids)
	if err != nil {
		return nil, fmt.Errorf("listing leaf partitions: %w", err)
	}
	out := map[uint32][]uint32{}
	var root, leaf int64
	if _, err := pgx.ForEachRow(rows, []any{&root, &leaf}, func() error {
		out[uint32(root)] = append(out[uint32(root)], uint32(leaf))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("listing leaf partitions: %w", err)
	}
	return out, nil
}

// HasDefault reports whether column of relation oid holds a value in the
// rows that existed before it was added: a default stored for them
// (atthasmissing: a non-volatile default of ADD COLUMN), or any default or
// generation expression (a volatile one rewrote the table). Neither writes
// a row to the WAL's logical stream.
func HasDefault(ctx context.Context, q Querier, oid uint32, column string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT a.atthasmissing OR EXISTS (SELECT 1 FROM pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum)
		FROM pg_attribute a WHERE a.attrelid = $1 AND a.attname = $2 AND NOT a.attisdropped`, oid, column).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // dropped again since
	}
	return ok, err
}
