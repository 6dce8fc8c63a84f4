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
// A Relation message shows each of them (against the one the session last
// saw), and the reader then resyncs the table by itself (AutoResync).

// Auto-resync reasons (sluice_reader_auto_resyncs_total{reason}).
const (
	ReasonColumnDefault = "column_default"
	ReasonColumnRenamed = "column_renamed"
	ReasonColumnReadded = "column_readded"
)

// AutoResyncFunc queues a resync of table (every destination) for reason.
type AutoResyncFunc func(ctx context.Context, table, reason, detail string) error

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
func CheckSchema(ctx context.Context, st *State, t source.Table, cur []pgoutput.Column, hasDefault HasDefaultFunc, autoResync AutoResyncFunc) (reason string, err error) {
	reason, detail, err := SchemaChange(ctx, hasDefault, t.OID, LastColumns(st, t), cur)
	if err != nil || reason == "" {
		return reason, err
	}
	if err := autoResync(ctx, t.Name, reason, detail+" (seen by the periodic schema check)"); err != nil {
		return reason, err
	}
	st.SetColumns(t.Name, cur)
	return reason, nil
}

// SchemaChange compares a table's columns (a Relation message's, or the
// catalog's) with the ones last seen and names the change that rewrote
// existing rows without WAL, or "" for none (a column added without a
// default reads NULL in older rows, as it should; a dropped one disappears
// from reads). hasDefault, when set, tells an added column's default.
func SchemaChange(ctx context.Context, hasDefault HasDefaultFunc, relid uint32, old, cur []pgoutput.Column) (reason, detail string, err error) {
	if len(old) == 0 {
		return "", "", nil
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
