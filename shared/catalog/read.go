package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog/chdb"
)

// Snapshot is one published catalog snapshot.
type Snapshot struct {
	Version     uint64    `json:"version"`
	PublishID   string    `json:"publish_id"`
	PublishedAt time.Time `json:"published_at"`
	ThroughLSN  proto.LSN `json:"-"`
	Through     string    `json:"through_lsn"` // Postgres text form of ThroughLSN
	// NewPacks and Packs count members, (pack, destination) inventory
	// rows: a per-destination pack is one, a segment one per destination
	// it holds.
	NewPacks uint64 `json:"new_packs"` // members this publish admitted
	Packs    uint64 `json:"packs"`     // members the snapshot holds
	// Pinned marks a pinned snapshot (never expired), with its reason;
	// set by RetainedSnapshots.
	Pinned    bool   `json:"pinned"`
	PinReason string `json:"pin_reason,omitempty"`
}

func snapshotFromRow(r []any) Snapshot {
	lsn := proto.LSN(asUint(r[3]))
	return Snapshot{
		Version:     asUint(r[0]),
		PublishID:   asString(r[1]),
		PublishedAt: time.UnixMicro(asInt(r[2])).UTC(),
		ThroughLSN:  lsn,
		Through:     lsn.String(),
		NewPacks:    asUint(r[4]),
		Packs:       asUint(r[5]),
	}
}

// Snapshots lists every retained snapshot (see RetainedSnapshots), oldest
// first.
func (c *Catalog) Snapshots(ctx context.Context) ([]Snapshot, error) {
	var out []Snapshot
	var before uint64
	for {
		page, next, err := c.RetainedSnapshots(ctx, SnapshotPage{Before: before})
		if err != nil {
			return nil, err
		}
		out = append(page, out...)
		if next == 0 {
			return out, nil
		}
		before = next
	}
}

// Snapshot returns the published snapshot at version, or ErrNoSnapshot.
func (c *Catalog) Snapshot(ctx context.Context, version uint64) (Snapshot, error) {
	// The watermark row records the cumulative pack count, so one row of
	// its sort key answers (the snapshots view sums over the history).
	res, err := c.conn.Query(ctx, "SELECT version, publish_id, published_at, through_lsn, new_packs, packs FROM "+ident(c.n.watermark())+" WHERE version = "+u64(version)+tiny)
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading snapshot %d: %w", version, err)
	}
	if len(res.Rows) == 0 {
		return Snapshot{}, c.missingVersion(ctx, version)
	}
	return snapshotFromRow(res.Rows[0]), nil
}

// latestVersionSQL reads the newest published version: no row when nothing
// is published. Read in the sort key's order, it reads the last granule of
// each part, not every snapshot's row (a max() would). Run alone it takes
// tiny; it carries no settings itself, since it is also a subquery of
// statements that scan a rows table (latestViewSQL).
func (c *Catalog) latestVersionSQL() string {
	return "SELECT version FROM " + ident(c.n.watermark()) + " ORDER BY version DESC LIMIT 1"
}

// Latest returns the newest published snapshot, or ErrNoSnapshot.
func (c *Catalog) Latest(ctx context.Context) (Snapshot, error) {
	res, err := c.conn.Query(ctx, c.latestVersionSQL()+tiny)
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading latest snapshot: %w", err)
	}
	if len(res.Rows) == 0 {
		return Snapshot{}, fmt.Errorf("%w: nothing published yet", ErrNoSnapshot)
	}
	return c.Snapshot(ctx, asUint(res.Rows[0][0]))
}

// resolveVersion returns the version a read reads: the latest (always
// retained) for 0, else version when it is published and retained, or,
// for a continuing read (a page after the first), not expired for longer
// than gc_grace (retention.go). Expiry changes, so an explicit version is
// checked on every call (one statement).
func (c *Catalog) resolveVersion(ctx context.Context, version uint64, continuing bool) (uint64, error) {
	if version == 0 {
		res, err := c.conn.Query(ctx, c.latestVersionSQL()+tiny)
		if err != nil {
			return 0, fmt.Errorf("reading latest snapshot: %w", err)
		}
		if len(res.Rows) == 0 {
			return 0, fmt.Errorf("%w: nothing published yet", ErrNoSnapshot)
		}
		v := asUint(res.Rows[0][0])
		c.published(v)
		return v, nil
	}
	if err := c.checkRetained(ctx, version, continuing); err != nil {
		return 0, err
	}
	c.published(version)
	return version, nil
}

// published remembers that version is a published snapshot (a bounded
// set: cleared when full).
func (c *Catalog) published(version uint64) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	if c.versions == nil || len(c.versions) >= 4096 {
		c.versions = map[uint64]bool{}
	}
	c.versions[version] = true
}

// resolution builds the per-key resolution of a rows table: grouped by
// (destination, primary key), the newest row by (position, pack identity),
// with TOAST-unchanged columns filled from the newest row that carried a
// value. The result's columns are the destination, the key columns, then
// _sluice_c<i> for each non-key column of ti in order, then (with system)
// the system columns _sluice_r_op, _r_unch, _r_lsn, _r_seq, _r_ct, _r_store,
// _r_pack (each _sluice_ prefixed), then _sluice_n<i> per array column.
// Every alias is under proto.SystemPrefix, so none can shadow a source
// column (rowDest).
func (c *Catalog) resolution(ti TableInfo, where string, system bool) string {
	return c.resolutionFrom(ti, c.rowsTable(ti), where, system)
}

// resolutionFrom is resolution over from (the rows table, or a subquery
// of it with the same columns).
func (c *Catalog) resolutionFrom(ti TableInfo, from, where string, system bool) string {
	return c.resolve(ti, from, where, system, false)
}

// resolve is resolutionFrom; with tombstones, a key whose winner is a
// tombstone keeps its row (its system columns tell: _sluice_r_op), where a
// read drops it.
func (c *Catalog) resolve(ti TableInfo, from, where string, system, tombstones bool) string {
	// The winner is the newest row by position, pack identity breaking ties
	// between copies of one change, so every value is deterministic (a tie
	// left to read order could change after a merge: rule 9).
	ord := "(_sluice_lsn, _sluice_seq, " + ident(rowStore) + ", " + ident(rowPack) + ")"
	pos := ord
	var nonKey []Column
	for _, col := range ti.Columns {
		if !ti.isKey(col.Name) {
			nonKey = append(nonKey, col)
		}
	}
	var tup []string
	for _, col := range nonKey {
		tup = append(tup, ident(col.Name))
	}
	tup = append(tup, "_sluice_op", "_sluice_unchanged", "_sluice_lsn", "_sluice_seq", "_sluice_commit_time", "toString("+ident(rowStore)+")", ident(rowPack), ident(proto.ColNulls))
	n := len(nonKey)
	keys := []string{ident(rowDest)}
	for _, k := range ti.PrimaryKey {
		keys = append(keys, ident(k))
	}
	// Two levels: the inner query aggregates (the winning row as one tuple
	// _sluice_w, and the TOAST carry-forward candidates _sluice_t<i>); the
	// outer one picks the columns. Referring to _sluice_w only as a column of the inner query keeps
	// the analyzer from expanding the whole argMax at every reference
	// (measured: planning alone took most of a page read).
	inner := append([]string{}, keys...)
	inner = append(inner, "argMax(tuple("+strings.Join(tup, ", ")+"), "+ord+") AS _sluice_w")
	out := append([]string{}, keys...)
	w := func(i int) string { return fmt.Sprintf("tupleElement(_sluice_w, %d)", i) }
	unchanged := func(col string) string { return "has(" + w(n+2) + ", " + quote(col) + ")" }
	for i, col := range nonKey {
		el := w(i + 1)
		if toastable(col.Kind) {
			t := "_sluice_t" + strconv.Itoa(i)
			inner = append(inner, fmt.Sprintf("argMaxIf(%s, %s, NOT has(_sluice_unchanged, %s)) AS %s", ident(col.Name), pos, quote(col.Name), t))
			el = "if(" + unchanged(col.Name) + ", " + t + ", " + el + ")"
		}
		out = append(out, el+" AS _sluice_c"+strconv.Itoa(i))
	}
	if system { // only when asked: every output column costs decoding
		for i, a := range resolvedSystem {
			out = append(out, w(n+1+i)+" AS "+a)
		}
	}
	// Array columns: ClickHouse arrays cannot be NULL, so whether the
	// winning value is NULL comes from the pack's null markers (taken from
	// the same row the value comes from, TOAST carry-forward included). They
	// follow the system columns as _sluice_n<i>, one per array column in order.
	for i, col := range nonKey {
		if _, isArray := col.Kind.Elem(); !isArray {
			continue
		}
		t := "_sluice_tn" + strconv.Itoa(i)
		inner = append(inner, fmt.Sprintf("argMaxIf(has(%s, %s), %s, NOT has(_sluice_unchanged, %s)) AS %s", ident(proto.ColNulls), quote(col.Name), pos, quote(col.Name), t))
		el := fmt.Sprintf("if(%s, %s, has(%s, %s))", unchanged(col.Name), t, w(n+8), quote(col.Name))
		out = append(out, el+" AS _sluice_n"+strconv.Itoa(i))
	}
	q := "SELECT " + strings.Join(out, ", ") + " FROM (SELECT " + strings.Join(inner, ", ") + " FROM " + from + " WHERE " + where +
		" GROUP BY " + strings.Join(keys, ", ") + ")"
	if tombstones {
		return q
	}
	return q + " WHERE " + w(n+1) + " NOT IN (" + strconv.Itoa(int(proto.OpDelete)) + ", " + strconv.Itoa(int(proto.OpMoveOut)) + ")"
}

// resolvedSystem are the aliases of the system columns a resolution with
// system gives, in order.
var resolvedSystem = []string{"_sluice_r_op", "_sluice_r_unch", "_sluice_r_lsn", "_sluice_r_seq", "_sluice_r_ct", "_sluice_r_store", "_sluice_r_pack"}

// latestViewSQL is the ad-hoc view of a table as of the latest published
// snapshot, every destination, with its real column names.
func (c *Catalog) latestViewSQL(ti TableInfo) string {
	latest := "(" + c.latestVersionSQL() + ")"
	inner := c.resolutionFrom(ti, c.clearedRows(ti, c.membership(latest, "", ti.Name)), c.clearedWhere(), true)
	out := []string{ident(rowDest)}
	i := 0
	for _, col := range ti.Columns {
		if ti.isKey(col.Name) {
			out = append(out, ident(col.Name))
			continue
		}
		out = append(out, "_sluice_c"+strconv.Itoa(i)+" AS "+ident(col.Name))
		i++
	}
	out = append(out, "_sluice_r_lsn AS _sluice_lsn", "_sluice_r_seq AS _sluice_seq", "_sluice_r_op AS _sluice_op", "_sluice_r_ct AS _sluice_commit_time",
		"_sluice_r_store AS "+ident(rowStore), "_sluice_r_pack AS "+ident(rowPack))
	return "SELECT " + strings.Join(out, ", ") + " FROM (" + inner + ")"
}

// ReadRequest asks for one page of a destination's table at a snapshot.
type ReadRequest struct {
	Destination string
	Table       string
	Version     uint64 // 0: the latest published snapshot
	Cursor      string // "" for the first page; Page.Next for the following ones
	Limit       int    // rows per page; default 1000, at most 100000
	// SystemColumns adds _sluice_lsn, _sluice_seq, _sluice_op,
	// _sluice_commit_time, _sluice_store_id and _sluice_pack_id to each row.
	SystemColumns bool
}

// Page is one page of rows, ordered by primary key.
type Page struct {
	Version uint64            `json:"version"`
	Rows    []json.RawMessage `json:"rows"`
	// Next is the cursor of the following page; "" when this page is the last.
	Next string `json:"next,omitempty"`
}

// Read returns one page of destination's copy of table as of the pinned
// snapshot: per primary key the newest row among the snapshot's packs,
// tombstones removed, TOAST-unchanged columns filled from the newest earlier
// value; each row a JSON object equal to the source row's to_jsonb(row).
//
// Its statements yield the embedded engine to the pipeline's (chdb.Behind):
// a read waits while the indexer, publisher or compaction waits, so reads
// never hold through_lsn back.
func (c *Catalog) Read(ctx context.Context, req ReadRequest) (Page, error) {
	ctx = chdb.Behind(ctx)
	if err := proto.ValidateDestination(req.Destination); err != nil {
		return Page{}, err
	}
	if req.Limit <= 0 {
		req.Limit = 1000
	}
	if req.Limit > 100000 {
		req.Limit = 100000
	}
	ti, err := c.Table(ctx, req.Table)
	if err != nil {
		return Page{}, err
	}
	v, err := c.resolveVersion(ctx, req.Version, req.Cursor != "")
	if err != nil {
		return Page{}, err
	}
	tv, err := c.viewAt(ctx, ti, v, req.Destination)
	if err != nil {
		return Page{}, err
	}
	ti = tv.ti
	where := tv.where()
	if req.Cursor != "" {
		after, err := cursorPredicate(ti, req.Cursor, ">")
		if err != nil {
			return Page{}, err
		}
		where += " AND " + after
	}
	// The page's key range first: the next Limit distinct keys, read in
	// primary-key order (the rows table is sorted by destination, key), so
	// the resolution below aggregates one page, not the destination.
	keys, err := c.keyPage(ctx, ti, where, req.Limit)
	if err != nil {
		return Page{}, fmt.Errorf("reading %s of %s at version %d: %w", req.Table, req.Destination, v, err)
	}
	page := Page{Version: v, Rows: []json.RawMessage{}}
	if len(keys) == 0 {
		return page, nil
	}
	last := keys[len(keys)-1]
	upTo, err := cursorPredicate(ti, encodeCursor(last), "<=")
	if err != nil {
		return Page{}, err
	}
	res, err := c.conn.Query(ctx, c.resolutionPage(ti, where+" AND "+upTo, req.SystemColumns, false))
	if err != nil {
		return Page{}, fmt.Errorf("reading %s of %s at version %d: %w", req.Table, req.Destination, v, err)
	}
	page.Rows = make([]json.RawMessage, 0, len(res.Rows))
	lay := newLayout(ti, req.SystemColumns)
	for _, r := range res.Rows {
		b, err := lay.render(r)
		if err != nil {
			return Page{}, fmt.Errorf("rendering %s of %s: %w", req.Table, req.Destination, err)
		}
		page.Rows = append(page.Rows, b)
	}
	if len(keys) == req.Limit {
		// A page may hold fewer rows than keys (tombstones); the cursor
		// follows the keys.
		page.Next = encodeCursor(last)
	}
	return page, nil
}

// tableView is one destination's table as a published snapshot holds it:
// the schema it reads (tableAt), its members and its clears.
type tableView struct {
	v       uint64
	dest    string
	ti      TableInfo
	members memberSet
	cleared cleared
}

// viewAt reads the view of destination's table ti at the published version
// v: three cached look-ups (the schema, the membership, the clears).
func (c *Catalog) viewAt(ctx context.Context, ti TableInfo, v uint64, destination string) (tableView, error) {
	ti, err := c.tableAt(ctx, ti, v)
	if err != nil {
		return tableView{}, err
	}
	members, err := c.members(ctx, v, destination, ti.Name)
	if err != nil {
		return tableView{}, err
	}
	cl, err := c.clearPredicate(ctx, v, destination, ti, members.pred)
	if err != nil {
		return tableView{}, err
	}
	return tableView{v: v, dest: destination, ti: ti, members: members, cleared: cl}, nil
}

// where is the predicate admitting the view's rows of its rows table.
func (tv tableView) where() string {
	return ident(rowDest) + " = " + quote(tv.dest) + " AND " + tv.members.pred + " AND " + tv.cleared.pred
}

// keyCols are ti's primary key columns as identifiers.
func keyCols(ti TableInfo) []string {
	out := make([]string, len(ti.PrimaryKey))
	for i, k := range ti.PrimaryKey {
		out[i] = ident(k)
	}
	return out
}

// keyPage reads the first limit distinct keys of the rows of ti's rows
// table that where admits, in primary-key order: one statement, under the
// read limits.
func (c *Catalog) keyPage(ctx context.Context, ti TableInfo, where string, limit int) ([][]any, error) {
	kc := strings.Join(keyCols(ti), ", ")
	res, err := c.conn.Query(ctx, "SELECT "+kc+" FROM "+c.rowsTable(ti)+" WHERE "+where+
		" ORDER BY "+kc+" LIMIT 1 BY "+kc+" LIMIT "+strconv.Itoa(limit)+c.readLimits.settings())
	if err != nil {
		return nil, err
	}
	return res.Rows, nil
}

// resolutionPage is the statement resolving the keys of ti's rows that
// where admits (see resolve), in (destination, key) order, under the read
// limits.
func (c *Catalog) resolutionPage(ti TableInfo, where string, system, tombstones bool) string {
	order := append([]string{ident(rowDest)}, keyCols(ti)...)
	return c.resolve(ti, c.rowsTable(ti), where, system, tombstones) + " ORDER BY " + strings.Join(order, ", ") + c.readLimits.settings()
}
