package catalog

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/pgtypes"
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
	res, err := c.conn.Query(ctx, "SELECT version, publish_id, published_at, through_lsn, new_packs, packs FROM "+ident(c.n.watermark())+" WHERE version = "+u64(version))
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
// each part, not every snapshot's row (a max() would).
func (c *Catalog) latestVersionSQL() string {
	return "SELECT version FROM " + ident(c.n.watermark()) + " ORDER BY version DESC LIMIT 1"
}

// Latest returns the newest published snapshot, or ErrNoSnapshot.
func (c *Catalog) Latest(ctx context.Context) (Snapshot, error) {
	res, err := c.conn.Query(ctx, c.latestVersionSQL())
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading latest snapshot: %w", err)
	}
	if len(res.Rows) == 0 {
		return Snapshot{}, fmt.Errorf("%w: nothing published yet", ErrNoSnapshot)
	}
	return c.Snapshot(ctx, asUint(res.Rows[0][0]))
}

// Membership. The members of snapshot V are the inventory rows at or below
// V's inventory high-water (publish.go, "The admitted set"), minus the
// members removed by the publishes at or below V (PublishReplace). So a
// read needs V's own watermark row (its high-water) and the removal sets,
// read from the rows that have one (the watermark's removals skip index):
// what it reads follows the destination's inventory rows and the removals,
// not the number of snapshots. Nothing older than the retention horizon is
// read but the removal sets: garbage collection may delete an expired
// watermark row only once the members it removed are gone from the
// inventory.

// hwAt is the inventory high-water of published version (SQL: a literal or
// a scalar) as a scalar: its watermark row, one point of the sort key.
func (c *Catalog) hwAt(version string) string {
	return "(SELECT max(inventory_block) FROM " + ident(c.n.watermark()) + " WHERE version = " + version + ")"
}

// removedSet is the set (store_id, pack_id, destination) removed by the
// publishes at or below version ("" any version) as an IN subquery.
func (c *Catalog) removedSet(version string) string {
	where := "removes > 0"
	if version != "" {
		where = "version <= " + version + " AND " + where
	}
	return "(SELECT r.1, r.2, r.3 FROM " + ident(c.n.watermark()) + " ARRAY JOIN removed AS r WHERE " + where + ")"
}

// memberRows is the predicate, over the inventory, of the member rows of
// snapshot version whose high-water is hw (both SQL; "" destination or
// table means any). Copies of one member (a pack indexed twice) may both
// match.
func (c *Catalog) memberRows(version, hw, destination, table string) string {
	where := []string{"_block_number <= " + hw}
	if destination != "" {
		where = append(where, "destination = "+quote(destination))
	}
	if table != "" {
		where = append(where, "table = "+quote(table))
	}
	where = append(where, "(store_id, pack_id, destination) NOT IN "+c.removedSet(version))
	return strings.Join(where, " AND ")
}

// membership is the predicate admitting the rows (of a rows table) of the
// members of snapshot version (an SQL expression; "" destination or table
// means any). A member is a (pack, destination): a segment's rows of a
// destination whose member was removed are not admitted, whatever its
// other destinations.
func (c *Catalog) membership(version, destination, table string) string {
	return fmt.Sprintf("(store_id, pack_id, destination) IN (SELECT store_id, pack_id, destination FROM %s WHERE %s)",
		ident(c.n.packs()), c.memberRows(version, c.hwAt(version), destination, table))
}

// highWater reads published version's inventory high-water, or
// ErrNoSnapshot.
func (c *Catalog) highWater(ctx context.Context, version uint64) (uint64, error) {
	res, err := c.conn.Query(ctx, "SELECT inventory_block FROM "+ident(c.n.watermark())+" WHERE version = "+u64(version)+" LIMIT 1")
	if err != nil {
		return 0, fmt.Errorf("reading snapshot %d: %w", version, err)
	}
	if len(res.Rows) == 0 {
		return 0, c.missingVersion(ctx, version)
	}
	return asUint(res.Rows[0][0]), nil
}

// Members returns the members of destination's table at published version
// ("" destination: every destination; "" table: every table), ordered by
// (destination, table, store_id, pack_id). Two statements: the version's
// high-water, then the inventory rows at or below it that no publish at or
// below the version removed.
func (c *Catalog) Members(ctx context.Context, version uint64, destination, table string) ([]Member, error) {
	hw, err := c.highWater(ctx, version)
	if err != nil {
		return nil, err
	}
	q := fmt.Sprintf("SELECT DISTINCT destination, table, store_id, pack_id FROM %s WHERE %s ORDER BY destination, table, store_id, pack_id",
		ident(c.n.packs()), c.memberRows(u64(version), u64(hw), destination, table))
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("reading the members of snapshot %d: %w", version, err)
	}
	out := make([]Member, 0, len(res.Rows))
	for _, r := range res.Rows {
		out = append(out, Member{Destination: asString(r[0]), Table: asString(r[1]), StoreID: asString(r[2]), PackID: asString(r[3])})
	}
	return out, nil
}

// maxLiteralMembers bounds the membership lists a read writes into its
// statements as literals; above it the statements carry the membership
// subquery.
const maxLiteralMembers = 2000

type memberKey struct {
	version            uint64
	destination, table string
}

// members returns the membership predicate of destination's table at the
// published version v (the read's statements also filter destination). A
// snapshot's membership never changes (its high-water and its removals are
// its own row and the rows below it, and no version at or below a
// published one can be published again), so a small membership is read
// once, remembered, and written as a literal list: the page's two
// statements then build no set from subqueries.
func (c *Catalog) members(ctx context.Context, v uint64, destination, table string) (string, error) {
	k := memberKey{v, destination, table}
	c.pubMu.Lock()
	pred, ok := c.memberCache[k]
	c.pubMu.Unlock()
	if ok {
		return pred, nil
	}
	hw, err := c.highWater(ctx, v)
	if err != nil {
		return "", err
	}
	// The literal high-water (a published snapshot's never changes) spares
	// the statements the scalar over the watermark.
	sub := fmt.Sprintf("(store_id, pack_id) IN (SELECT store_id, pack_id FROM %s WHERE %s)",
		ident(c.n.packs()), c.memberRows(u64(v), u64(hw), destination, table))
	q := fmt.Sprintf("SELECT DISTINCT store_id, pack_id FROM %s WHERE %s ORDER BY store_id, pack_id LIMIT %d",
		ident(c.n.packs()), c.memberRows(u64(v), u64(hw), destination, table), maxLiteralMembers+1)
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return "", fmt.Errorf("reading membership of %s of %s at version %d: %w", table, destination, v, err)
	}
	switch n := len(res.Rows); {
	case n > maxLiteralMembers:
		pred = sub
	case n == 0:
		pred = "0"
	default:
		var b strings.Builder
		b.WriteString("(store_id, pack_id) IN (")
		for i, r := range res.Rows {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(" + quote(asString(r[0])) + ", " + quote(asString(r[1])) + ")")
		}
		b.WriteString(")")
		pred = b.String()
	}
	c.pubMu.Lock()
	if c.memberCache == nil || len(c.memberCache) >= 64 {
		c.memberCache = map[memberKey]string{}
	}
	c.memberCache[k] = pred
	c.pubMu.Unlock()
	return pred, nil
}

type tableAtKey struct {
	version uint64
	table   string
}

// tableAt returns the description of table ti as of published version v:
// the schema of the table's newest change among v's packs, in any
// destination. Not the latest registration: after a restart packs of an
// older schema can be indexed after a newer one's, and a column added and
// dropped again makes an older fingerprint current again; not the union of
// columns: to_jsonb of the source row has exactly the current ones. A
// snapshot's membership never changes, so neither does the answer, which is
// remembered per (version, table).
func (c *Catalog) tableAt(ctx context.Context, ti TableInfo, v uint64) (TableInfo, error) {
	if c.latestRegistration {
		return ti, nil
	}
	k := tableAtKey{v, ti.Name}
	c.pubMu.Lock()
	fp, ok := c.tableAtCache[k]
	c.pubMu.Unlock()
	if !ok {
		var err error
		if fp, err = c.newestSchema(ctx, ti.Name, v); err != nil {
			return TableInfo{}, err
		}
		c.pubMu.Lock()
		if c.tableAtCache == nil || len(c.tableAtCache) >= 256 {
			c.tableAtCache = map[tableAtKey]string{}
		}
		c.tableAtCache[k] = fp
		c.pubMu.Unlock()
	}
	if fp == "" || fp == ti.Fingerprint {
		return ti, nil
	}
	for range 2 {
		st, err := c.tableState(ctx, ti.Name)
		if err != nil {
			return TableInfo{}, err
		}
		c.mu.Lock()
		at, ok := st.infos[fp]
		c.mu.Unlock()
		if ok {
			return at, nil
		}
		if err := c.loadTables(ctx, false); err != nil { // registered since the last load
			return TableInfo{}, err
		}
	}
	return TableInfo{}, fmt.Errorf("%w: %s has packs of schema %s, which the table registry does not hold", ErrBadSchema, ti.Name, fp)
}

// newestAt is the newest change among a table's members at a published
// version: its pack's schema fingerprint and position, with the version's
// high-water.
type newestAt struct {
	version, hw uint64
	fp          string
	lsn, seq    uint64
	found       bool
}

// newestSchema returns the schema fingerprint of table's newest change
// among the packs of published version v ("" when it has none). Members
// only accrue between two versions unless a publish between them removed
// some, so from the answer for an earlier version (remembered per table)
// it reads only the inventory rows between the two high-waters; after a
// removal between them, when the earlier version's row is gone, or with
// nothing remembered, all of v's members.
// Either way one statement.
func (c *Catalog) newestSchema(ctx context.Context, table string, v uint64) (string, error) {
	c.pubMu.Lock()
	prev, havePrev := c.newest[table]
	c.pubMu.Unlock()
	wt := ident(c.n.watermark())
	hw := c.hwAt(u64(v))
	from := "0"
	removals := "0"
	if havePrev && prev.version < v {
		from = u64(prev.hw)
		// A removal between the two versions, or the earlier version's row
		// gone or different (expired and collected, or a rebuild since:
		// the inventory's blocks start again), means a full read.
		removals = fmt.Sprintf("((SELECT count() FROM %[1]s WHERE version > %[2]d AND version <= %[3]d AND removes > 0) + (SELECT count() = 0 FROM %[1]s WHERE version = %[2]d AND inventory_block = %[4]d))", wt, prev.version, v, prev.hw)
	}
	q := fmt.Sprintf(`WITH %s AS hw, %s AS removals
		SELECT hw, removals, argMax((fingerprint, last_lsn, last_seq), (last_lsn, last_seq)), count()
		FROM %s WHERE _block_number > if(removals = 0, %s, 0) AND %s`,
		hw, removals, ident(c.n.packs()), from, c.memberRows(u64(v), "hw", "", table))
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return "", fmt.Errorf("reading the schema of %s at version %d: %w", table, v, err)
	}
	if len(res.Rows) != 1 {
		return "", fmt.Errorf("reading the schema of %s at version %d: %w", table, v, errNoRows)
	}
	r := res.Rows[0]
	cur := newestAt{version: v, hw: asUint(r[0])}
	if havePrev && prev.version < v && asUint(r[1]) == 0 {
		cur.fp, cur.lsn, cur.seq, cur.found = prev.fp, prev.lsn, prev.seq, prev.found
	}
	if w, _ := r[2].([]any); asUint(r[3]) > 0 && len(w) == 3 {
		lsn, seq := asUint(w[1]), asUint(w[2])
		if !cur.found || lsn > cur.lsn || (lsn == cur.lsn && seq >= cur.seq) {
			cur.fp, cur.lsn, cur.seq, cur.found = asString(w[0]), lsn, seq, true
		}
	}
	c.pubMu.Lock()
	if old, ok := c.newest[table]; !ok || old.version < v {
		if c.newest == nil || len(c.newest) >= 256 {
			c.newest = map[string]newestAt{}
		}
		c.newest[table] = cur
	}
	c.pubMu.Unlock()
	return cur.fp, nil
}

// Destinations returns, per table, the destinations holding packs in the
// snapshot at version (0: latest).
func (c *Catalog) Destinations(ctx context.Context, version uint64) (map[string][]string, error) {
	v, err := c.resolveVersion(ctx, version, false)
	if err != nil {
		return nil, err
	}
	hw, err := c.highWater(ctx, v)
	if err != nil {
		return nil, err
	}
	q := fmt.Sprintf("SELECT table, arraySort(groupUniqArray(destination)) FROM %s WHERE %s GROUP BY table ORDER BY table",
		ident(c.n.packs()), c.memberRows(u64(v), u64(hw), "", ""))
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("listing destinations at version %d: %w", v, err)
	}
	out := map[string][]string{}
	for _, r := range res.Rows {
		out[asString(r[0])] = asStrings(r[1])
	}
	return out, nil
}

// resolveVersion returns the version a read reads: the latest (always
// retained) for 0, else version when it is published and retained, or,
// for a continuing read (a page after the first), not expired for longer
// than gc_grace (retention.go). Expiry changes, so an explicit version is
// checked on every call (one statement).
func (c *Catalog) resolveVersion(ctx context.Context, version uint64, continuing bool) (uint64, error) {
	if version == 0 {
		res, err := c.conn.Query(ctx, c.latestVersionSQL())
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
// value. The result's columns are destination, the key columns, then _c<i>
// for each non-key column of ti in order, then the system columns _op,
// _lsn, _seq, _ct, _store, _pack.
func (c *Catalog) resolution(ti TableInfo, where string, system bool) string {
	// The winner is the newest row by position, pack identity breaking ties
	// between copies of one change, so every value is deterministic (a tie
	// left to read order could change after a merge: rule 9).
	const ord = "(_sluice_lsn, _sluice_seq, store_id, pack_id)"
	const pos = ord
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
	tup = append(tup, "_sluice_op", "_sluice_unchanged", "_sluice_lsn", "_sluice_seq", "_sluice_commit_time", "toString(store_id)", "pack_id", ident(proto.ColNulls))
	n := len(nonKey)
	keys := []string{"destination"}
	for _, k := range ti.PrimaryKey {
		keys = append(keys, ident(k))
	}
	// Two levels: the inner query aggregates (the winning row as one tuple
	// _w, and the TOAST carry-forward candidates _t<i>); the outer one picks
	// the columns. Referring to _w only as a column of the inner query keeps
	// the analyzer from expanding the whole argMax at every reference
	// (measured: planning alone took most of a page read).
	inner := append([]string{}, keys...)
	inner = append(inner, "argMax(tuple("+strings.Join(tup, ", ")+"), "+ord+") AS _w")
	out := append([]string{}, keys...)
	w := func(i int) string { return fmt.Sprintf("tupleElement(_w, %d)", i) }
	unchanged := func(col string) string { return "has(" + w(n+2) + ", " + quote(col) + ")" }
	for i, col := range nonKey {
		el := w(i + 1)
		if toastable(col.Kind) {
			t := "_t" + strconv.Itoa(i)
			inner = append(inner, fmt.Sprintf("argMaxIf(%s, %s, NOT has(_sluice_unchanged, %s)) AS %s", ident(col.Name), pos, quote(col.Name), t))
			el = "if(" + unchanged(col.Name) + ", " + t + ", " + el + ")"
		}
		out = append(out, el+" AS _c"+strconv.Itoa(i))
	}
	if system { // only when asked: every output column costs decoding
		for i, a := range []string{"_op", "_unch", "_lsn", "_seq", "_ct", "_store", "_pack"} {
			out = append(out, w(n+1+i)+" AS "+a)
		}
	}
	// Array columns: ClickHouse arrays cannot be NULL, so whether the
	// winning value is NULL comes from the pack's null markers (taken from
	// the same row the value comes from, TOAST carry-forward included). They
	// follow the system columns as _n<i>, one per array column in order.
	for i, col := range nonKey {
		if _, isArray := col.Kind.Elem(); !isArray {
			continue
		}
		t := "_tn" + strconv.Itoa(i)
		inner = append(inner, fmt.Sprintf("argMaxIf(has(%s, %s), %s, NOT has(_sluice_unchanged, %s)) AS %s", ident(proto.ColNulls), quote(col.Name), pos, quote(col.Name), t))
		el := fmt.Sprintf("if(%s, %s, has(%s, %s))", unchanged(col.Name), t, w(n+8), quote(col.Name))
		out = append(out, el+" AS _n"+strconv.Itoa(i))
	}
	return "SELECT " + strings.Join(out, ", ") + " FROM (SELECT " + strings.Join(inner, ", ") + " FROM " + ident(c.n.rows(ti.Name)) + " WHERE " + where +
		" GROUP BY " + strings.Join(keys, ", ") + ") WHERE " + w(n+1) + " NOT IN (" + strconv.Itoa(int(proto.OpDelete)) + ", " + strconv.Itoa(int(proto.OpMoveOut)) + ")"
}

// latestViewSQL is the ad-hoc view of a table as of the latest published
// snapshot, every destination, with its real column names.
func (c *Catalog) latestViewSQL(ti TableInfo) string {
	latest := "(" + c.latestVersionSQL() + ")"
	inner := c.resolution(ti, c.membership(latest, "", ti.Name), true)
	out := []string{"destination"}
	i := 0
	for _, col := range ti.Columns {
		if ti.isKey(col.Name) {
			out = append(out, ident(col.Name))
			continue
		}
		out = append(out, "_c"+strconv.Itoa(i)+" AS "+ident(col.Name))
		i++
	}
	out = append(out, "_lsn AS _sluice_lsn", "_seq AS _sluice_seq", "_op AS _sluice_op", "_ct AS _sluice_commit_time", "_store AS store_id", "_pack AS pack_id")
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
func (c *Catalog) Read(ctx context.Context, req ReadRequest) (Page, error) {
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
	if ti, err = c.tableAt(ctx, ti, v); err != nil {
		return Page{}, err
	}
	members, err := c.members(ctx, v, req.Destination, req.Table)
	if err != nil {
		return Page{}, err
	}
	where := "destination = " + quote(req.Destination) + " AND " + members
	if req.Cursor != "" {
		after, err := cursorPredicate(ti, req.Cursor, ">")
		if err != nil {
			return Page{}, err
		}
		where += " AND " + after
	}
	keyCols := make([]string, len(ti.PrimaryKey))
	for i, k := range ti.PrimaryKey {
		keyCols[i] = ident(k)
	}
	// The page's key range first: the next Limit distinct keys, read in
	// primary-key order (the rows table is sorted by destination, key), so
	// the resolution below aggregates one page, not the destination.
	kq := "SELECT " + strings.Join(keyCols, ", ") + " FROM " + ident(c.n.rows(ti.Name)) + " WHERE " + where +
		" ORDER BY " + strings.Join(keyCols, ", ") + " LIMIT 1 BY " + strings.Join(keyCols, ", ") + " LIMIT " + strconv.Itoa(req.Limit)
	keys, err := c.conn.Query(ctx, kq)
	if err != nil {
		return Page{}, fmt.Errorf("reading %s of %s at version %d: %w", req.Table, req.Destination, v, err)
	}
	page := Page{Version: v, Rows: []json.RawMessage{}}
	if len(keys.Rows) == 0 {
		return page, nil
	}
	last := keys.Rows[len(keys.Rows)-1]
	upTo, err := cursorPredicate(ti, encodeCursor(last), "<=")
	if err != nil {
		return Page{}, err
	}
	order := append([]string{"destination"}, keyCols...)
	q := c.resolution(ti, where+" AND "+upTo, req.SystemColumns) + " ORDER BY " + strings.Join(order, ", ")
	res, err := c.conn.Query(ctx, q)
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
	if len(keys.Rows) == req.Limit {
		// A page may hold fewer rows than keys (tombstones); the cursor
		// follows the keys.
		page.Next = encodeCursor(last)
	}
	return page, nil
}

// layout is where each source column sits in a resolution row (see
// resolution: destination, the key columns, _c<i> per non-key column, the
// seven system columns when asked, then _n<i> per non-key array column),
// with each column's JSON key rendered once per page.
type layout struct {
	cols   []Column
	at     []int    // value index per column
	null   []int    // NULL-marker index per column, -1 for none
	keys   [][]byte // `"name":` per column
	system int      // index of the first system column, -1 when not asked
}

func newLayout(ti TableInfo, system bool) *layout {
	nk := len(ti.PrimaryKey)
	l := &layout{cols: ti.Columns, system: -1}
	next := 1 + nk
	var arrays []int
	for ci, col := range ti.Columns {
		l.keys = append(l.keys, appendKey(nil, col.Name))
		l.null = append(l.null, -1)
		if ki := slices.Index(ti.PrimaryKey, col.Name); ki >= 0 {
			l.at = append(l.at, 1+ki)
			continue
		}
		l.at = append(l.at, next)
		next++
		if _, isArray := col.Kind.Elem(); isArray {
			arrays = append(arrays, ci)
		}
	}
	if system {
		l.system = next
		next += 7
	}
	for _, ci := range arrays {
		l.null[ci] = next
		next++
	}
	return l
}

// render renders one resolution row as the source row's to_jsonb.
func (l *layout) render(r []any) (json.RawMessage, error) {
	b := make([]byte, 0, 256)
	b = append(b, '{')
	var err error
	for ci, col := range l.cols {
		v := r[l.at[ci]]
		if at := l.null[ci]; at >= 0 && at < len(r) && asBool(r[at]) {
			v = nil
		}
		if ci > 0 {
			b = append(b, ',')
		}
		b = append(b, l.keys[ci]...)
		if b, err = pgtypes.AppendJSON(b, col.Kind, v); err != nil {
			return nil, fmt.Errorf("column %s: %w", col.Name, err)
		}
	}
	if l.system >= 0 {
		// _op, _unch, _lsn, _seq, _ct, _store, _pack
		s := r[l.system:]
		b = append(b, ',')
		b = appendKey(b, proto.ColLSN)
		b = strconv.AppendQuote(b, proto.LSN(asUint(s[2])).String())
		b = append(b, ',')
		b = appendKey(b, proto.ColSeq)
		b = strconv.AppendUint(b, asUint(s[3]), 10)
		b = append(b, ',')
		b = appendKey(b, proto.ColOp)
		b = strconv.AppendInt(b, asInt(s[0]), 10)
		b = append(b, ',')
		b = appendKey(b, proto.ColCommitTime)
		if b, err = pgtypes.AppendJSON(b, proto.KindTimestampTZ, s[4]); err != nil {
			return nil, fmt.Errorf("column %s: %w", proto.ColCommitTime, err)
		}
		b = append(b, ',')
		b = appendKey(b, "_sluice_store_id")
		b = strconv.AppendQuote(b, asString(s[5]))
		b = append(b, ',')
		b = appendKey(b, "_sluice_pack_id")
		b = strconv.AppendQuote(b, asString(s[6]))
	}
	b = append(b, '}')
	return b, nil
}

func appendKey(b []byte, k string) []byte {
	kb, _ := json.Marshal(k)
	b = append(b, kb...)
	return append(b, ':')
}

// ---- keyset cursors ----

type cursor struct {
	Key []any `json:"k"`
}

func encodeCursor(key []any) string {
	b, _ := json.Marshal(cursor{Key: key})
	return base64.RawURLEncoding.EncodeToString(b)
}

// cursorPredicate turns a cursor into "(key...) <op> (values...)".
func cursorPredicate(ti TableInfo, s, op string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var cur cursor
	if err := dec.Decode(&cur); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	if len(cur.Key) != len(ti.PrimaryKey) {
		return "", fmt.Errorf("%w: %d key values for a %d-column primary key", ErrBadCursor, len(cur.Key), len(ti.PrimaryKey))
	}
	cols := make([]string, len(ti.PrimaryKey))
	vals := make([]string, len(ti.PrimaryKey))
	for i, k := range ti.PrimaryKey {
		col, _ := ti.Column(k)
		lit, err := literal(col.Kind, cur.Key[i])
		if err != nil {
			return "", fmt.Errorf("%w: column %s: %v", ErrBadCursor, k, err)
		}
		cols[i] = ident(k)
		vals[i] = lit
	}
	return "(" + strings.Join(cols, ", ") + ") " + op + " (" + strings.Join(vals, ", ") + ")", nil
}

// literal renders a cursor value as an SQL literal of the key column's
// storage type.
func literal(k proto.Kind, v any) (string, error) {
	switch chScalar(k) {
	case "Int16", "Int32", "Int64":
		n, ok := v.(json.Number)
		if !ok {
			return "", fmt.Errorf("want an integer, got %T", v)
		}
		x, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return "", err
		}
		return "toInt64(" + strconv.FormatInt(x, 10) + ")", nil
	case "Float32", "Float64":
		switch x := v.(type) {
		case json.Number:
			f, err := strconv.ParseFloat(string(x), 64)
			if err != nil {
				return "", err
			}
			return "toFloat64(" + strconv.FormatFloat(f, 'g', -1, 64) + ")", nil
		case string: // NaN, Inf
			f, err := strconv.ParseFloat(x, 64)
			if err != nil {
				return "", err
			}
			return "toFloat64(" + quote(strconv.FormatFloat(f, 'g', -1, 64)) + ")", nil
		}
		return "", fmt.Errorf("want a number, got %T", v)
	case "Bool":
		b, ok := v.(bool)
		if !ok {
			return "", fmt.Errorf("want a boolean, got %T", v)
		}
		return strconv.FormatBool(b), nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %T", v)
	}
	return quote(s), nil
}

// asBool reads a normalized boolean (Bool or a UInt8 0/1).
func asBool(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case int64:
		return x != 0
	case uint64:
		return x != 0
	}
	return false
}
