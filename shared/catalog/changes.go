package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog/chdb"
)

// The change feed (docs/adr/0046-change-feed.md): the rows of a
// destination's table that differ between two published snapshots, each
// key's resolved row at From against its resolved row at To, exactly as two
// Reads would render them. Only candidate keys are resolved: the keys of
// the rows of the members one snapshot holds and the other does not (the
// packs and segments published between them, and the members a compaction
// or purge removed between them). A key whose rows are in neither has the
// same rows at both versions, so the same resolution. That holds while both
// versions read the same schema and the same clear bound: when a clear (a
// TRUNCATE, a resync's) or a schema change lies between them, every key of
// both versions is a candidate.

// ErrBadRange is returned by Changes for a range it cannot serve: no From,
// or From after To.
var ErrBadRange = errors.New("invalid snapshot range")

// ErrGenerationChanged is returned by Changes for two versions that read
// different generations of the table (a column's kind or the primary key
// changed between them, docs/adr/0028-table-generations.md): their rows are
// not comparable key by key.
var ErrGenerationChanged = errors.New("table generation changed between the versions")

// ChangesRequest asks for one page of the changes of a destination's table
// between two published snapshots.
type ChangesRequest struct {
	Destination string
	Table       string
	From        uint64 // required
	To          uint64 // 0: the latest published snapshot
	Cursor      string // "" for the first page; ChangesPage.Next for the following ones
	Limit       int    // candidate keys per page; default 1000, at most 100000
}

// The operations of a Change.
const (
	ChangeInsert = "insert" // absent at From, present at To
	ChangeUpdate = "update" // present at both, different
	ChangeDelete = "delete" // present at From, absent at To
)

// Change is one key whose row differs between From and To.
type Change struct {
	Op string `json:"op"`
	// Position is the source position (proto.Position text, LSN:seq) of
	// the key's newest change at To: the row version, or the delete's
	// tombstone, or the clear that removed it; "" when not known (a row
	// removed with its member, by a purge).
	Position string          `json:"position,omitempty"`
	Key      json.RawMessage `json:"key"`           // the primary key columns
	Row      json.RawMessage `json:"row,omitempty"` // at To (insert, update), as Read renders it
	Old      json.RawMessage `json:"old,omitempty"` // at From (update, delete)
}

// ChangeColumn is a column of the rows a page's changes carry.
type ChangeColumn struct {
	Name string     `json:"name"`
	Kind proto.Kind `json:"kind"`
}

// ChangesPage is one page of changes, in primary-key order.
type ChangesPage struct {
	From    uint64   `json:"from"`
	To      uint64   `json:"to"`
	Changes []Change `json:"changes"`
	// Columns are the columns of To's schema, then any of From's it no
	// longer has (the columns Row and Old carry).
	Columns []ChangeColumn `json:"columns"`
	// Candidates counts the keys this page compared; Full says that every
	// key of both versions is a candidate (a clear or a schema change lies
	// between them), not only those of the members between them.
	Candidates int  `json:"candidates"`
	Full       bool `json:"full"`
	// Next is the cursor of the following page; "" when this page is the
	// last. A page may hold fewer changes than candidates, none included.
	Next string `json:"next,omitempty"`
}

// Changes returns one page of the changes of destination's table between
// the published snapshots From and To: every key whose resolved row (as
// Read resolves and renders it) differs between them, keyset-paged in
// primary-key order. Both versions must be retained (else an
// *ExpiredError naming the oldest retained one); From == To is empty;
// From > To is ErrBadRange. Every statement yields the engine to the
// pipeline's (chdb.Behind) and carries the read limits.
func (c *Catalog) Changes(ctx context.Context, req ChangesRequest) (ChangesPage, error) {
	ctx = chdb.Behind(ctx)
	if err := proto.ValidateDestination(req.Destination); err != nil {
		return ChangesPage{}, err
	}
	if req.From == 0 {
		return ChangesPage{}, fmt.Errorf("%w: from is required", ErrBadRange)
	}
	if req.To != 0 && req.From > req.To {
		return ChangesPage{}, fmt.Errorf("%w: from %d is after to %d", ErrBadRange, req.From, req.To)
	}
	if req.Limit <= 0 {
		req.Limit = 1000
	}
	req.Limit = min(req.Limit, 100000)
	ti, err := c.Table(ctx, req.Table)
	if err != nil {
		return ChangesPage{}, err
	}
	continuing := req.Cursor != ""
	to, err := c.resolveVersion(ctx, req.To, continuing)
	if err != nil {
		return ChangesPage{}, err
	}
	if req.From > to {
		return ChangesPage{}, fmt.Errorf("%w: from %d is after to %d (the latest)", ErrBadRange, req.From, to)
	}
	if _, err := c.resolveVersion(ctx, req.From, continuing); err != nil {
		return ChangesPage{}, err
	}
	page := ChangesPage{From: req.From, To: to, Changes: []Change{}}
	a, err := c.viewAt(ctx, ti, req.From, req.Destination)
	if err != nil {
		return ChangesPage{}, err
	}
	b, err := c.viewAt(ctx, ti, to, req.Destination)
	if err != nil {
		return ChangesPage{}, err
	}
	page.Columns = changeColumns(a.ti, b.ti)
	if req.From == to {
		return page, nil
	}
	if a.ti.Generation != b.ti.Generation {
		return ChangesPage{}, fmt.Errorf("%w: %s reads generation %d at version %d and %d at version %d; read both snapshots instead",
			ErrGenerationChanged, req.Table, max(a.ti.Generation, 1), req.From, max(b.ti.Generation, 1), to)
	}
	cand, full := candidates(a, b, c.changesNoFallback)
	page.Full = full
	if cand == "0" {
		return page, nil // the same members, the same clears, the same schema
	}
	where := ident(rowDest) + " = " + quote(req.Destination) + " AND " + cand
	if continuing {
		after, err := cursorPredicate(b.ti, req.Cursor, ">")
		if err != nil {
			return ChangesPage{}, err
		}
		where += " AND " + after
	}
	keys, err := c.keyPage(ctx, b.ti, where, req.Limit)
	if err != nil {
		return ChangesPage{}, fmt.Errorf("reading the changes of %s of %s from version %d to %d: %w", req.Table, req.Destination, req.From, to, err)
	}
	page.Candidates = len(keys)
	if len(keys) == 0 {
		return page, nil
	}
	last := keys[len(keys)-1]
	upTo, err := cursorPredicate(b.ti, encodeCursor(last), "<=")
	if err != nil {
		return ChangesPage{}, err
	}
	// Each version resolves the page's candidate keys only (the key set is
	// the page's statement again, which the primary key index prunes by),
	// tombstone winners kept so that a delete has its tombstone's position.
	kc := strings.Join(keyCols(b.ti), ", ")
	inPage := "(" + kc + ") IN (SELECT " + kc + " FROM " + c.rowsTable(b.ti) + " WHERE " + where + " AND " + upTo + ")"
	old, err := c.resolveKeys(ctx, a, inPage)
	if err != nil {
		return ChangesPage{}, err
	}
	cur, err := c.resolveKeys(ctx, b, inPage)
	if err != nil {
		return ChangesPage{}, err
	}
	klay := keyLayout(b.ti)
	for _, k := range keys {
		key, err := klay.render(append([]any{nil}, k...))
		if err != nil {
			return ChangesPage{}, fmt.Errorf("rendering a key of %s: %w", req.Table, err)
		}
		was, is := old[string(key)], cur[string(key)]
		ch := Change{Key: key, Position: is.position}
		switch {
		case was.row == nil && is.row == nil:
			continue
		case was.row == nil:
			ch.Op, ch.Row = ChangeInsert, is.row
		case is.row == nil:
			ch.Op, ch.Old = ChangeDelete, was.row
			if is.position == "" && b.cleared.has && b.cleared.at != a.cleared.at {
				ch.Position = b.cleared.at.String() // removed by the clear
			}
		case bytes.Equal(was.row, is.row):
			continue
		default:
			ch.Op, ch.Row, ch.Old = ChangeUpdate, is.row, was.row
		}
		page.Changes = append(page.Changes, ch)
	}
	if len(keys) == req.Limit {
		page.Next = encodeCursor(last)
	}
	return page, nil
}

// candidates is the predicate admitting the rows whose keys are the
// candidates of a change feed from a to b ("0": none), and whether it is
// every key of both (full). Within one schema and one clear bound the
// candidates are the keys of the members one version holds and the other
// does not; the membership lists are compared here when both are small,
// else in the statement.
func candidates(a, b tableView, noFallback bool) (pred string, full bool) {
	if (a.ti.Fingerprint != b.ti.Fingerprint || a.cleared != b.cleared) && !noFallback {
		return "((" + a.members.pred + " AND " + a.cleared.pred + ") OR (" + b.members.pred + " AND " + b.cleared.pred + "))", true
	}
	if a.members.listed && b.members.listed {
		d := symmetricDifference(a.members.ids, b.members.ids)
		if len(d) == 0 {
			return "0", false
		}
		return literalMembers(d) + " AND " + b.cleared.pred, false
	}
	return "(((" + b.members.pred + ") AND NOT (" + a.members.pred + ")) OR ((" + a.members.pred + ") AND NOT (" + b.members.pred + "))) AND " + b.cleared.pred, false
}

// symmetricDifference returns the ids in exactly one of x and y, both
// sorted (members lists them in (store, pack) order).
func symmetricDifference(x, y []packID) []packID {
	var out []packID
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case j == len(y) || (i < len(x) && less(x[i], y[j])):
			out = append(out, x[i])
			i++
		case i == len(x) || less(y[j], x[i]):
			out = append(out, y[j])
			j++
		default:
			i++
			j++
		}
	}
	return out
}

func less(a, b packID) bool {
	if a.store != b.store {
		return a.store < b.store
	}
	return a.pack < b.pack
}

// resolved is one key's resolution at a version: its row as Read renders
// it (nil when the key has no row there: a tombstone winner, or no rows),
// and its winner's position ("" with no rows).
type resolved struct {
	row      json.RawMessage
	position string
}

// resolveKeys resolves the keys of tv's rows that keys admits, by their
// rendered key.
func (c *Catalog) resolveKeys(ctx context.Context, tv tableView, keys string) (map[string]resolved, error) {
	res, err := c.conn.Query(ctx, c.resolutionPage(tv.ti, tv.where()+" AND "+keys, true, true))
	if err != nil {
		return nil, fmt.Errorf("reading %s of %s at version %d: %w", tv.ti.Name, tv.dest, tv.v, err)
	}
	lay := newLayout(tv.ti, true)
	lay.quiet = true
	klay := keyLayout(tv.ti)
	out := make(map[string]resolved, len(res.Rows))
	for _, r := range res.Rows {
		key, err := klay.render(r)
		if err != nil {
			return nil, fmt.Errorf("rendering a key of %s: %w", tv.ti.Name, err)
		}
		s := r[lay.system:] // resolvedSystem: op, unchanged, lsn, seq, ...
		rv := resolved{position: proto.Position{LSN: proto.LSN(asUint(s[2])), Seq: asUint(s[3])}.String()}
		if !proto.IsTombstone(int8(asInt(s[0]))) {
			if rv.row, err = lay.render(r); err != nil {
				return nil, fmt.Errorf("rendering %s of %s: %w", tv.ti.Name, tv.dest, err)
			}
		}
		out[string(key)] = rv
	}
	return out, nil
}

// changeColumns are b's columns, then a's that b does not have.
func changeColumns(a, b TableInfo) []ChangeColumn {
	out := make([]ChangeColumn, 0, len(b.Columns))
	for _, col := range b.Columns {
		out = append(out, ChangeColumn{Name: col.Name, Kind: col.Kind})
	}
	for _, col := range a.Columns {
		if _, ok := b.Column(col.Name); !ok {
			out = append(out, ChangeColumn{Name: col.Name, Kind: col.Kind})
		}
	}
	return out
}
