package capture

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
)

// Schema changes that write no WAL for the rows they change: the rows a
// table already holds change, but the stream carries nothing for them.
//   - ADD COLUMN … DEFAULT: existing rows read the default (pg_attribute's
//     atthasmissing, or a rewrite for a volatile default), the catalog's copy
//     reads NULL;
//   - RENAME COLUMN: existing rows' values are under the new name;
//   - a column dropped and added again under its name: existing rows hold
//     NULL (or the new default) there, the catalog's copy the old values.
// A Relation message shows the first two (against the one the session last
// saw), and the third when the column moved after another; one that was
// the last column comes back in its place, under its name and type, and
// only its attnum (pg_attribute, read on every Relation message and by the
// periodic check) tells. The reader then resyncs the table by itself
// (AutoResync).

// Auto-resync reasons (sluice_reader_auto_resyncs_total{reason}).
const (
	ReasonColumnDefault = "column_default"
	ReasonColumnRenamed = "column_renamed"
	ReasonColumnReadded = "column_readded"
	ReasonPartitions    = "partitions"
)

// AutoResyncFunc queues a resync of table (every destination) for reason.
type AutoResyncFunc func(ctx context.Context, table, reason, detail string) error

// ColumnNums are a table's live columns' attnums, by name.
type ColumnNums map[string]int16

// ColumnNumsFunc reads relation relid's ColumnNums from the catalog.
type ColumnNumsFunc func(ctx context.Context, relid uint32) (ColumnNums, error)

// LastColumnNums are the attnums last read for t's columns (SetColumnNums),
// else the ones the reader read at start; nil when neither is known.
func LastColumnNums(st *State, t source.Table) ColumnNums {
	if nums := st.ColumnNums(t.Name); nums != nil {
		return nums
	}
	if len(t.ColumnNums) != len(t.Columns) {
		return nil
	}
	out := make(ColumnNums, len(t.Columns))
	for i, n := range t.Columns {
		out[n] = t.ColumnNums[i]
	}
	return out
}

// readded returns a column both old and cur have under another attnum
// (sorted first, for a stable detail), or "".
func readded(old, cur ColumnNums) string {
	var out string
	for n, num := range cur {
		if was, ok := old[n]; ok && was != num && (out == "" || n < out) {
			out = n
		}
	}
	return out
}

// HasDefaultFunc reports whether column of relation relid has a value in
// the rows it existed before (a default at ADD COLUMN time).
type HasDefaultFunc func(ctx context.Context, relid uint32, column string) (bool, error)

// LastColumns are the columns last described for table: by its last
// Relation message (State.SetColumns, this process), by the periodic check
// that found a change the stream has not carried yet (CheckSchema), else
// the ones the reader described at start (names only; generated columns,
// which pgoutput does not send, left out). A change made while the reader
// was down, with no Relation message in between, is compared with the
// start's description and not seen.
func LastColumns(st *State, t source.Table) []pgoutput.Column {
	if cols := st.Columns(t.Name); cols != nil {
		return cols
	}
	var out []pgoutput.Column
	for _, n := range t.Columns {
		if slices.ContainsFunc(t.Generated, func(g source.Generated) bool { return g.Name == n }) {
			continue
		}
		out = append(out, pgoutput.Column{Name: n})
	}
	return out
}

// CheckSchema is the periodic check of a table's catalog columns (cur: its
// live, not generated columns in attnum order, as a Relation message would
// list them) between Relation messages, which come only with a change of
// the table: a schema change that rewrote existing rows without WAL is
// resynced (autoResync) without waiting for one. The columns become the
// table's last described (State.SetColumns), so the Relation message that
// comes with its next change does not queue the resync again.
//
// curNums are the catalog's attnums of cur (nil: not compared); they become
// the table's last read ones whatever the outcome.
func CheckSchema(ctx context.Context, st *State, t source.Table, cur []pgoutput.Column, curNums ColumnNums, hasDefault HasDefaultFunc, autoResync AutoResyncFunc) (reason string, err error) {
	reason, detail, err := SchemaChange(ctx, hasDefault, t.OID, LastColumns(st, t), cur, LastColumnNums(st, t), curNums)
	if err != nil {
		return reason, err
	}
	if reason != "" {
		if err := autoResync(ctx, t.Name, reason, detail+" (seen by the periodic schema check)"); err != nil {
			return reason, err
		}
		st.SetColumns(t.Name, cur)
	}
	if curNums != nil {
		st.SetColumnNums(t.Name, curNums)
	}
	return reason, nil
}

// CheckPartitions is the periodic check of a partitioned table's leaf
// partitions (cur, ascending): ATTACH PARTITION brings the attached table's
// rows into it and DETACH PARTITION takes them out, with no row in the
// WAL, so a change of the set resyncs the table (autoResync) like a schema
// change that rewrote its rows. The set becomes the last read.
func CheckPartitions(ctx context.Context, st *State, t source.Table, cur []uint32, autoResync AutoResyncFunc) (string, error) {
	old, ok := st.Partitions(t.Name)
	if !ok {
		old = t.Partitions
	}
	if slices.Equal(old, cur) {
		return "", nil
	}
	var added, gone []uint32
	for _, p := range cur {
		if !slices.Contains(old, p) {
			added = append(added, p)
		}
	}
	for _, p := range old {
		if !slices.Contains(cur, p) {
			gone = append(gone, p)
		}
	}
	detail := fmt.Sprintf("partitions attached (relations %v) or detached (relations %v): their rows moved without WAL (seen by the periodic schema check)", added, gone)
	if err := autoResync(ctx, t.Name, ReasonPartitions, detail); err != nil {
		return "", err
	}
	st.SetPartitions(t.Name, cur)
	return ReasonPartitions, nil
}

// SchemaChange compares a table's columns (a Relation message's, or the
// catalog's) with the ones last seen and names the change that rewrote
// existing rows without WAL, or "" for none (a column added without a
// default reads NULL in older rows, as it should; a dropped one disappears
// from reads). hasDefault, when set, tells an added column's default;
// oldNums and curNums, when both are set, the attnums of the columns then
// and now (a column of both under another attnum was dropped and added
// again, wherever it stands).
func SchemaChange(ctx context.Context, hasDefault HasDefaultFunc, relid uint32, old, cur []pgoutput.Column, oldNums, curNums ColumnNums) (reason, detail string, err error) {
	if len(old) == 0 {
		return "", "", nil
	}
	if oldNums != nil && curNums != nil {
		if n := readded(oldNums, curNums); n != "" {
			return ReasonColumnReadded, fmt.Sprintf("column %s dropped and added again (attnum %d, was %d)", n, curNums[n], oldNums[n]), nil
		}
	}
	names := func(cs []pgoutput.Column) []string {
		out := make([]string, len(cs))
		for i, c := range cs {
			out[i] = c.Name
		}
		return out
	}
	on, cn := names(old), names(cur)
	// A rename keeps the column's place and type, under a name the old
	// columns do not have.
	if len(on) == len(cn) {
		for i := range on {
			sameType := old[i].TypeOID == 0 || old[i].TypeOID == cur[i].TypeOID // 0: described at start, by name only
			if on[i] != cn[i] && !slices.Contains(on, cn[i]) && !slices.Contains(cn, on[i]) && sameType {
				return ReasonColumnRenamed, fmt.Sprintf("column %s renamed to %s", on[i], cn[i]), nil
			}
		}
	}
	// Dropped and added again: a column of both lists moved after one that
	// was after it (an added column goes last).
	var common []string
	for _, n := range on {
		if slices.Contains(cn, n) {
			common = append(common, n)
		}
	}
	var inCur []string
	for _, n := range cn {
		if slices.Contains(common, n) {
			inCur = append(inCur, n)
		}
	}
	if !slices.Equal(common, inCur) {
		for i := range common {
			if common[i] != inCur[i] {
				return ReasonColumnReadded, fmt.Sprintf("column %s dropped and added again", inCur[len(inCur)-1]), nil
			}
		}
	}
	if hasDefault == nil {
		return "", "", nil
	}
	for _, n := range cn {
		if slices.Contains(on, n) {
			continue
		}
		ok, err := hasDefault(ctx, relid, n)
		if err != nil {
			return "", "", fmt.Errorf("reading the default of added column %s: %w", n, err)
		}
		if ok {
			return ReasonColumnDefault, fmt.Sprintf("column %s added with a default that existing rows hold", n), nil
		}
	}
	return "", "", nil
}
