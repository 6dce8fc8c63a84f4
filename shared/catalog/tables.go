package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sluice-cdc/sluice/proto"
)

// loadTables reads the registry into memory. With create, it also makes
// sure every registered table's latest view exists.
func (c *Catalog) loadTables(ctx context.Context, _ bool) error {
	res, err := c.conn.Query(ctx, "SELECT table, fingerprint, columns, primary_key, routing, registered_at, generation FROM "+ident(c.n.tables())+" FINAL ORDER BY table, generation, registered_at, fingerprint")
	if err != nil {
		return fmt.Errorf("reading table registry: %w", err)
	}
	loaded := map[string]*tableState{}
	for _, r := range res.Rows {
		var cols []Column
		if err := json.Unmarshal([]byte(asString(r[2])), &cols); err != nil {
			return fmt.Errorf("reading table registry: table %s: %w", asString(r[0]), err)
		}
		ti := TableInfo{Name: asString(r[0]), Fingerprint: asString(r[1]), Columns: cols, PrimaryKey: asStrings(r[3]), Routing: asString(r[4]), Generation: int(asUint(r[6]))}
		st := loaded[ti.Name]
		if st == nil {
			st = &tableState{fps: map[string]bool{}, infos: map[string]TableInfo{}}
			loaded[ti.Name] = st
		}
		if st.columns == nil || ti.Generation > st.info.Generation {
			st.columns = map[string]proto.Kind{} // the kinds of the newest generation
		}
		st.info = ti // the latest registration wins (reads use tableAt)
		st.fps[ti.Fingerprint] = true
		st.infos[ti.Fingerprint] = ti
		for _, col := range cols {
			st.columns[col.Name] = col.Kind
		}
	}
	c.mu.Lock()
	c.tables = loaded
	c.mu.Unlock()
	return nil
}

func (c *Catalog) tableState(ctx context.Context, table string) (*tableState, error) {
	c.mu.Lock()
	st := c.tables[table]
	c.mu.Unlock()
	if st != nil {
		return st, nil
	}
	if err := c.loadTables(ctx, false); err != nil {
		return nil, err
	}
	c.mu.Lock()
	st = c.tables[table]
	c.mu.Unlock()
	if st == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTable, table)
	}
	return st, nil
}

// registered returns the registration of table's schema fingerprint fp (its
// generation included), reading the registry again when this catalog has
// not seen it.
func (c *Catalog) registered(ctx context.Context, table, fp string) (TableInfo, error) {
	for range 2 {
		st, err := c.tableState(ctx, table)
		if err != nil {
			return TableInfo{}, err
		}
		c.mu.Lock()
		ti, ok := st.infos[fp]
		c.mu.Unlock()
		if ok {
			return ti, nil
		}
		if err := c.loadTables(ctx, false); err != nil {
			return TableInfo{}, err
		}
	}
	return TableInfo{}, fmt.Errorf("%w: %s has packs of schema %s, which the table registry does not hold", ErrBadSchema, table, fp)
}

// rowsTable is the rows table ti's packs are indexed into: its generation's.
func (c *Catalog) rowsTable(ti TableInfo) string { return ident(c.n.rowsGen(ti.Name, ti.Generation)) }

// generationOf is the generation a new schema ti of a registered table
// belongs to: the newest generation's, unless ti changes its primary key or
// the kind of a column the newest generation holds (a column whose type
// changed at the source: the reader halts the table and a resync copies it
// again under the new schema). Then ti opens the next generation: a rows
// table of its own, so no rows table ever holds one column in two kinds,
// and a snapshot reads the generation of its newest change (tableAt), the
// older generations staying readable at the snapshots that held them.
func generationOf(st *tableState, ti TableInfo) (gen int, why string) {
	if st == nil {
		return 1, ""
	}
	gen = max(st.info.Generation, 1)
	if !slices.Equal(st.info.PrimaryKey, ti.PrimaryKey) {
		return gen + 1, fmt.Sprintf("primary key changed from %v to %v", st.info.PrimaryKey, ti.PrimaryKey)
	}
	for _, col := range ti.Columns {
		if k, ok := st.columns[col.Name]; ok && k != col.Kind {
			return gen + 1, fmt.Sprintf("column %s changed kind from %s to %s", col.Name, k, col.Kind)
		}
	}
	return gen, ""
}

// Register makes sure the rows table for ti exists with every column of ti
// (a new column becomes ADD COLUMN), records ti's fingerprint in the
// registry with its generation (generationOf) and refreshes the table's
// latest view. It returns the registration, whose Generation names the
// rows table ti's packs go to. It is idempotent and cheap for a
// fingerprint already registered.
func (c *Catalog) Register(ctx context.Context, ti TableInfo) (TableInfo, error) {
	c.mu.Lock()
	st := c.tables[ti.Name]
	if st != nil && st.fps[ti.Fingerprint] {
		reg := st.infos[ti.Fingerprint]
		c.mu.Unlock()
		return reg, nil
	}
	var why string
	ti.Generation, why = generationOf(st, ti)
	c.mu.Unlock()
	if why != "" {
		c.log.Warn("table schema opens a new generation", "table", ti.Name, "generation", ti.Generation, "fingerprint", ti.Fingerprint, "change", why)
	}
	name := c.n.rowsGen(ti.Name, ti.Generation)
	rt := ident(name)
	var cols []string
	cols = append(cols, ident(rowDest)+" LowCardinality(String)")
	for _, col := range ti.Columns {
		cols = append(cols, ident(col.Name)+" "+chStorage(col.Kind, ti.isKey(col.Name)))
	}
	cols = append(cols,
		ident(proto.ColLSN)+" UInt64", ident(proto.ColSeq)+" UInt64", ident(proto.ColOp)+" Int8",
		ident(proto.ColUnchanged)+" Array(String)", ident(proto.ColCommitTime)+" Nullable(Int64)",
		ident(rowStore)+" LowCardinality(String)", ident(rowPack)+" String", ident(proto.ColNulls)+" Array(String)")
	order := []string{ident(rowDest)}
	for _, k := range ti.PrimaryKey {
		order = append(order, ident(k))
	}
	order = append(order, ident(rowStore), ident(rowPack), ident(proto.ColLSN), ident(proto.ColSeq))
	create := "CREATE TABLE IF NOT EXISTS " + rt + " (" + strings.Join(cols, ", ") + ") ENGINE = ReplacingMergeTree ORDER BY (" + strings.Join(order, ", ") + ")"
	if err := c.conn.Exec(ctx, create); err != nil {
		return TableInfo{}, refusal(ti, fmt.Errorf("creating rows table for %s: %w", ti.Name, err))
	}
	// Columns added at the source since the table was created.
	res, err := c.conn.Query(ctx, "SELECT name, type FROM system.columns WHERE database = currentDatabase() AND table = "+quote(name))
	if err != nil {
		return TableInfo{}, fmt.Errorf("reading columns of %s: %w", name, err)
	}
	have := map[string]string{}
	for _, r := range res.Rows {
		have[asString(r[0])] = asString(r[1])
	}
	for _, col := range ti.Columns {
		want := chStorage(col.Kind, ti.isKey(col.Name))
		got, ok := have[col.Name]
		if !ok {
			if err := c.conn.Exec(ctx, "ALTER TABLE "+rt+" ADD COLUMN IF NOT EXISTS "+ident(col.Name)+" "+want); err != nil {
				return TableInfo{}, refusal(ti, fmt.Errorf("adding column %s to %s: %w", col.Name, name, err))
			}
			continue
		}
		if got != want && !(ti.isKey(col.Name) && got == "Nullable("+want+")") {
			return TableInfo{}, &TableRefusedError{Table: ti.Name, Fingerprint: ti.Fingerprint, Err: fmt.Errorf("column %s is %s in the catalog, the pack needs %s", col.Name, got, want)}
		}
	}
	colsJSON, err := json.Marshal(ti.Columns)
	if err != nil {
		return TableInfo{}, fmt.Errorf("registering %s: %w", ti.Name, err)
	}
	pk := make([]string, len(ti.PrimaryKey))
	for i, k := range ti.PrimaryKey {
		pk[i] = quote(k)
	}
	ins := fmt.Sprintf("INSERT INTO %s (table, fingerprint, columns, primary_key, routing, registered_at, generation) SELECT %s, %s, %s, [%s], %s, toUnixTimestamp64Micro(now64(6)), %d WHERE (SELECT count() FROM %s WHERE table = %s AND fingerprint = %s) = 0",
		ident(c.n.tables()), quote(ti.Name), quote(ti.Fingerprint), quote(string(colsJSON)), strings.Join(pk, ", "), quote(ti.Routing), ti.Generation,
		ident(c.n.tables()), quote(ti.Name), quote(ti.Fingerprint))
	if err := c.conn.Exec(ctx, ins); err != nil {
		return TableInfo{}, fmt.Errorf("registering %s: %w", ti.Name, err)
	}
	if err := c.loadTables(ctx, false); err != nil {
		return TableInfo{}, err
	}
	// Another indexer may have registered this fingerprint first: its
	// registration (and generation) is the one.
	reg, err := c.registered(ctx, ti.Name, ti.Fingerprint)
	if err != nil {
		return TableInfo{}, err
	}
	if reg.Generation != ti.Generation {
		return reg, nil // its rows table was created before its registration
	}
	st, err = c.tableState(ctx, ti.Name)
	if err != nil {
		return TableInfo{}, err
	}
	if err := c.conn.Exec(ctx, "CREATE OR REPLACE VIEW "+ident(c.n.latest(ti.Name))+" AS "+c.latestViewSQL(st.info)); err != nil {
		return TableInfo{}, fmt.Errorf("creating latest view of %s: %w", ti.Name, err)
	}
	return reg, nil
}

// refusalCodes are the engine's error codes that refuse a DDL statement
// for what it says (its names, types or the change it asks), so that
// running it again can only fail again. Anything else (a timeout, memory,
// the network, a concurrent ALTER, a read-only replica) may pass on retry.
var refusalCodes = map[int]string{
	15:  "DUPLICATE_COLUMN",
	16:  "NO_SUCH_COLUMN_IN_TABLE",
	36:  "BAD_ARGUMENTS",
	43:  "ILLEGAL_TYPE_OF_ARGUMENT",
	44:  "ILLEGAL_COLUMN",
	47:  "UNKNOWN_IDENTIFIER",
	50:  "UNKNOWN_TYPE",
	62:  "SYNTAX_ERROR",
	70:  "CANNOT_CONVERT_TYPE",
	179: "MULTIPLE_EXPRESSIONS_FOR_ALIAS",
	352: "AMBIGUOUS_COLUMN_NAME",
	420: "CANNOT_UPDATE_COLUMN",
	524: "ALTER_OF_COLUMN_IS_FORBIDDEN",
}

// refusedByEngine reports whether err is the engine refusing a statement
// for what it says (refusalCodes).
func refusedByEngine(err error) bool {
	var ex *Exception
	return errors.As(err, &ex) && refusalCodes[ex.Code] != ""
}

// refusal is err of a DDL statement of ti's rows table: a
// TableRefusedError when the engine refused the statement, else err
// (retried).
func refusal(ti TableInfo, err error) error {
	if refusedByEngine(err) {
		return &TableRefusedError{Table: ti.Name, Fingerprint: ti.Fingerprint, Err: err}
	}
	return err
}

// Tables lists every captured table the catalog holds.
func (c *Catalog) Tables(ctx context.Context) ([]TableInfo, error) {
	if err := c.loadTables(ctx, false); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]TableInfo, 0, len(c.tables))
	for _, st := range c.tables {
		out = append(out, st.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Table returns one captured table's description.
func (c *Catalog) Table(ctx context.Context, table string) (TableInfo, error) {
	st, err := c.tableState(ctx, table)
	if err != nil {
		return TableInfo{}, err
	}
	return st.info, nil
}

// ---- value helpers over normalized Result values ----
