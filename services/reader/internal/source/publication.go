package source

// The publication rules: what the configured publication must publish for
// every captured table, how sluice tells a publication it created (a
// comment), what it repairs and what it refuses. README "The publication
// rules" is the user's view of the same.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PublicationMarker starts the comment sluice sets on a publication it
// creates (COMMENT ON PUBLICATION): such a publication is sluice's to
// repair. One without it (the user's, or one an older sluice created) is
// only checked; removing the comment hands it to the user, and setting it
// hands it to sluice.
const PublicationMarker = "created by sluice"

const markerComment = PublicationMarker + ": the reader repairs this publication when it captures less than source.tables needs (drop this comment to manage it yourself)"

// Problem is one way a publication captures less of a configured table
// than sluice needs.
type Problem struct {
	Table string // the configured table
	What  string // what is wrong
	Fix   string // the SQL that fixes it, for the message (no final semicolon)
	// Repair are the statements sluice runs on a publication it created;
	// none: it cannot repair this by itself (a configuration conflict).
	Repair []string
}

func (p Problem) String() string {
	return fmt.Sprintf("table %s: %s: run %s", p.Table, p.What, p.Fix)
}

// PublicationCheck is what CheckPublication found.
type PublicationCheck struct {
	Exists   bool
	Owned    bool // carries PublicationMarker: sluice created it
	Problems []Problem
}

// Tables are the configured tables a problem concerns, in order, once.
func (c PublicationCheck) Tables() []string {
	var out []string
	for _, p := range c.Problems {
		if !slices.Contains(out, p.Table) {
			out = append(out, p.Table)
		}
	}
	return out
}

// Err is the refusal of a publication with problems (nil without), wrapping
// ErrInvalidSource: it names the publication and, per table, what is wrong
// and the SQL that fixes it.
func (c PublicationCheck) Err(pub string) error {
	if len(c.Problems) == 0 {
		return nil
	}
	var b strings.Builder
	for i, p := range c.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	hint := ""
	if !c.Owned {
		hint = fmt.Sprintf(" (sluice did not create it, so it does not change it; to let sluice repair it: COMMENT ON PUBLICATION %s IS '%s')", pubIdent(pub), PublicationMarker)
	}
	return invalid("publication %s captures less than sluice needs, so tenants' copies would silently miss rows, columns or changes: %s%s", pub, b.String(), hint)
}

func pubIdent(pub string) string { return pgx.Identifier{pub}.Sanitize() }

func tableIdent(t string) string {
	s, r, _ := strings.Cut(t, ".")
	return pgx.Identifier{s, r}.Sanitize()
}

// CheckPublication checks that publication pub publishes insert, update,
// delete and truncate of every table in tables as the table itself, every
// row and every column: no row filter or column list (Postgres 15+) on it
// or on a partitioned ancestor it is published through; membership by FOR
// TABLE, FOR TABLES IN SCHEMA (15+), FOR ALL TABLES, or a published
// ancestor; publish_via_partition_root on when a table is partitioned (its
// changes come as its partitions' otherwise), and no partition published
// as its ancestor. It reads only the catalogs, and works on Postgres 14
// (where a publication has no row filters, column lists or schemas).
func CheckPublication(ctx context.Context, q Querier, pub string, tables []string) (PublicationCheck, error) {
	var c PublicationCheck
	var version int
	if err := q.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return c, fmt.Errorf("reading the server version: %w", err)
	}
	var (
		oid                  int64
		allTables, viaRoot   bool
		ins, upd, del, trunc bool
		comment              string
	)
	err := q.QueryRow(ctx, `SELECT oid::int8, puballtables, pubviaroot, pubinsert, pubupdate, pubdelete, pubtruncate,
		coalesce(obj_description(oid, 'pg_publication'), '') FROM pg_catalog.pg_publication WHERE pubname = $1`, pub).
		Scan(&oid, &allTables, &viaRoot, &ins, &upd, &del, &trunc, &comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("reading publication %s: %w", pub, err)
	}
	c.Exists, c.Owned = true, strings.HasPrefix(comment, PublicationMarker)

	// The tables listed (FOR TABLE), with their row filter and column list.
	type entry struct{ filter, columns string }
	relSQL := `SELECT prrelid::int8, NULL::text, NULL::text FROM pg_catalog.pg_publication_rel WHERE prpubid = $1::oid`
	if version >= 150000 {
		relSQL = `SELECT prrelid::int8, pg_catalog.pg_get_expr(prqual, prrelid),
			(SELECT string_agg(attname, ', ' ORDER BY attnum) FROM pg_catalog.pg_attribute WHERE attrelid = prrelid AND attnum = ANY(prattrs))
			FROM pg_catalog.pg_publication_rel WHERE prpubid = $1::oid`
	}
	rows, err := q.Query(ctx, relSQL, oid)
	if err != nil {
		return c, fmt.Errorf("listing the tables of publication %s: %w", pub, err)
	}
	rels := map[int64]entry{}
	var rel int64
	var filter, columns *string
	_, err = pgx.ForEachRow(rows, []any{&rel, &filter, &columns}, func() error {
		var e entry
		if filter != nil {
			e.filter = *filter
		}
		if columns != nil {
			e.columns = *columns
		}
		rels[rel] = e
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("listing the tables of publication %s: %w", pub, err)
	}
	var schemas []int64 // FOR TABLES IN SCHEMA
	if version >= 150000 {
		rows, err := q.Query(ctx, `SELECT pnnspid::int8 FROM pg_catalog.pg_publication_namespace WHERE pnpubid = $1::oid`, oid)
		if err != nil {
			return c, fmt.Errorf("listing the schemas of publication %s: %w", pub, err)
		}
		if schemas, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return c, fmt.Errorf("listing the schemas of publication %s: %w", pub, err)
		}
	}

	// Each configured table, with its ancestors (nearest first) and their
	// schemas.
	var ss, rs []string
	for _, t := range tables {
		s, r, _ := strings.Cut(t, ".")
		ss, rs = append(ss, s), append(rs, r)
	}
	rows, err = q.Query(ctx, `SELECT t.s || '.' || t.r, c.oid::int8, c.relkind::text, c.relnamespace::int8,
		ARRAY(SELECT a.relid::int8 FROM pg_catalog.pg_partition_ancestors(c.oid) WITH ORDINALITY AS a(relid, o) WHERE a.relid <> c.oid ORDER BY a.o),
		ARRAY(SELECT ac.relnamespace::int8 FROM pg_catalog.pg_partition_ancestors(c.oid) WITH ORDINALITY AS a(relid, o)
			JOIN pg_catalog.pg_class ac ON ac.oid = a.relid WHERE a.relid <> c.oid ORDER BY a.o),
		ARRAY(SELECT an.nspname || '.' || ac.relname FROM pg_catalog.pg_partition_ancestors(c.oid) WITH ORDINALITY AS a(relid, o)
			JOIN pg_catalog.pg_class ac ON ac.oid = a.relid JOIN pg_catalog.pg_namespace an ON an.oid = ac.relnamespace
			WHERE a.relid <> c.oid ORDER BY a.o)
		FROM unnest($1::text[], $2::text[]) AS t(s, r)
		JOIN pg_catalog.pg_namespace n ON n.nspname = t.s
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.r AND c.relkind IN ('r', 'p')`, ss, rs)
	if err != nil {
		return c, fmt.Errorf("describing the captured tables for publication %s: %w", pub, err)
	}
	type table struct {
		oid, nsp       int64
		kind           string
		ancestors, ans []int64
		ancNames       []string
	}
	found := map[string]table{}
	var name string
	var tb table
	_, err = pgx.ForEachRow(rows, []any{&name, &tb.oid, &tb.kind, &tb.nsp, &tb.ancestors, &tb.ans, &tb.ancNames}, func() error {
		found[name] = tb
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("describing the captured tables for publication %s: %w", pub, err)
	}

	p := pubIdent(pub)
	published := func(rel, nsp int64) bool {
		_, listed := rels[rel]
		return allTables || listed || slices.Contains(schemas, nsp)
	}
	var missingActions []string
	for a, on := range map[string]bool{"insert": ins, "update": upd, "delete": del, "truncate": trunc} {
		if !on {
			missingActions = append(missingActions, a)
		}
	}
	slices.Sort(missingActions)
	configured := func(rel int64) bool {
		for _, t := range found {
			if t.oid == rel {
				return true
			}
		}
		return false
	}
	for _, name := range tables {
		t, ok := found[name]
		if !ok {
			continue // Describe refuses it
		}
		add := func(what, fix string, repair ...string) {
			c.Problems = append(c.Problems, Problem{Table: name, What: what, Fix: fix, Repair: repair})
		}
		// Published as which relation: itself, or with publish_via_partition_root
		// its topmost published ancestor.
		as, asName := int64(0), ""
		if published(t.oid, t.nsp) {
			as, asName = t.oid, name
		}
		for i, a := range t.ancestors {
			switch {
			case !published(a, t.ans[i]):
			case viaRoot:
				as, asName = a, t.ancNames[i]
			case as == 0: // through its ancestor, as itself
				as, asName = t.oid, name
			}
		}
		if as == 0 {
			add(notInPublication+", so none of its changes are captured",
				fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", p, tableIdent(name)),
				fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", p, tableIdent(name)))
			continue
		}
		if len(missingActions) > 0 {
			fix := fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate')", p)
			add(fmt.Sprintf("the publication does not publish %s (publish = '...'), so those changes are not captured", strings.Join(missingActions, ", ")), fix, fix)
		}
		if t.kind == "p" && !viaRoot {
			fix := fmt.Sprintf("ALTER PUBLICATION %s SET (publish_via_partition_root = true)", p)
			add("it is partitioned and publish_via_partition_root is off, so its changes are published as its partitions', which sluice does not capture", fix, fix)
		}
		if as != t.oid {
			what := fmt.Sprintf("it is a partition and publish_via_partition_root is on, so its changes are published as its ancestor %s's, which sluice does not read as this table's", asName)
			fix := fmt.Sprintf("capture %s instead (in source.tables), or ALTER PUBLICATION %s SET (publish_via_partition_root = false); if no captured table is partitioned", asName, p)
			var repair []string
			if _, listed := rels[as]; listed && !configured(as) && !allTables && !slices.Contains(schemas, t.ans[slices.Index(t.ancestors, as)]) {
				// Listed by itself but not captured: a table dropped
				// from source.tables.
				fix = fmt.Sprintf("ALTER PUBLICATION %s DROP TABLE %s", p, tableIdent(asName))
				repair = []string{fix}
			}
			add(what, fix, repair...)
			continue
		}
		// The row filter and column list of the relation it is published as,
		// and of the ones between (conservative: Postgres applies one).
		for _, rel := range append([]int64{t.oid}, t.ancestors...) {
			e, listed := rels[rel]
			if !listed || (e.filter == "" && e.columns == "") {
				continue
			}
			relName := name
			if rel != t.oid {
				relName = t.ancNames[slices.Index(t.ancestors, rel)]
			}
			// Listed again without a filter or column list, in one
			// transaction (DROP and ADD TABLE work on Postgres 15+, where
			// these exist, whether or not its schema is published too).
			fix := fmt.Sprintf("BEGIN; ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s; COMMIT", p, tableIdent(relName), p, tableIdent(relName))
			repair := []string{fmt.Sprintf("ALTER PUBLICATION %s DROP TABLE %s", p, tableIdent(relName)), fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", p, tableIdent(relName))}
			if e.filter != "" {
				on := ""
				if rel != t.oid {
					on = " (on its ancestor " + relName + ")"
				}
				add(fmt.Sprintf("it has a row filter%s, WHERE %s, so rows outside it are not captured", on, e.filter), fix, repair...)
			}
			if e.columns != "" {
				on := ""
				if rel != t.oid {
					on = " (on its ancestor " + relName + ")"
				}
				add(fmt.Sprintf("it has a column list%s, (%s), so its other columns are not captured", on, e.columns), fix, repair...)
			}
		}
	}
	return c, nil
}

// Repairable reports whether sluice may repair every problem itself: it
// created the publication and each problem has repair statements.
func (c PublicationCheck) Repairable() bool {
	if !c.Owned {
		return false
	}
	for _, p := range c.Problems {
		if len(p.Repair) == 0 {
			return false
		}
	}
	return true
}

// RepairPublication runs the repair statements of c's problems (each once,
// in order) in one transaction.
func RepairPublication(ctx context.Context, q Querier, pub string, c PublicationCheck) error {
	var stmts []string
	for _, p := range c.Problems {
		for _, s := range p.Repair {
			if !slices.Contains(stmts, s) {
				stmts = append(stmts, s)
			}
		}
	}
	if len(stmts) == 0 {
		return nil
	}
	// One simple-protocol string: Postgres runs it as one transaction.
	sql := strings.Join(stmts, "; ")
	if _, err := q.Exec(ctx, sql); err != nil {
		return fmt.Errorf("repairing publication %s: %w (or run: %s)", pub, err, sql)
	}
	return nil
}

// Ensured is what EnsurePublication did.
type Ensured struct {
	// Check is the existing publication as found (before a repair).
	Check   PublicationCheck
	Created bool
	// Added are the configured tables added to the publication: their
	// existing rows need a copy.
	Added []string
	// Repaired are the tables whose capture was a subset (a row filter, a
	// column list, a publish subset, partitions published otherwise) that
	// were repaired: what the stream missed of them needs a copy.
	Repaired []string
}

// EnsurePublication creates the publication for tables (marked as
// sluice's), or checks the existing one (CheckPublication): one sluice
// created is repaired, any other with a problem is refused with an error
// that says, per table, what is wrong and the SQL that fixes it. It is
// idempotent.
func EnsurePublication(ctx context.Context, q Querier, pub string, tables []string) (Ensured, error) {
	var res Ensured
	c, err := CheckPublication(ctx, q, pub, tables)
	if err != nil {
		return res, err
	}
	res.Check = c
	if !c.Exists {
		// publish_via_partition_root: a partitioned table's changes are
		// published as the table itself (the one configured), not as its
		// partitions, which sluice does not capture. The comment marks it
		// as sluice's (one transaction: there is no unmarked moment).
		quoted := make([]string, len(tables))
		for i, t := range tables {
			quoted[i] = tableIdent(t)
		}
		create := "CREATE PUBLICATION " + pubIdent(pub) + " FOR TABLE " + strings.Join(quoted, ", ") + " WITH (publish_via_partition_root = true)"
		sql := create + "; COMMENT ON PUBLICATION " + pubIdent(pub) + " IS '" + markerComment + "'"
		if _, err := q.Exec(ctx, sql); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42710" { // created concurrently
				return EnsurePublication(ctx, q, pub, tables)
			}
			return res, fmt.Errorf("creating publication %s: %w (or create it yourself: %s)", pub, err, create)
		}
		res.Created = true
		return res, nil
	}
	if len(c.Problems) == 0 {
		return res, nil
	}
	if !c.Repairable() {
		return res, c.Err(pub)
	}
	if err := RepairPublication(ctx, q, pub, c); err != nil {
		return res, err
	}
	after, err := CheckPublication(ctx, q, pub, tables)
	if err != nil {
		return res, err
	}
	if err := after.Err(pub); err != nil {
		return res, fmt.Errorf("after repairing it: %w", err)
	}
	for _, p := range c.Problems {
		if strings.HasPrefix(p.What, notInPublication) {
			res.Added = append(res.Added, p.Table)
		}
	}
	for _, t := range c.Tables() {
		if !slices.Contains(res.Added, t) {
			res.Repaired = append(res.Repaired, t)
		}
	}
	return res, nil
}

const notInPublication = "it is not in the publication"
