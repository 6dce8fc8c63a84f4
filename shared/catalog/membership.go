package catalog

import (
	"context"
	"fmt"
	"strings"
)

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
	return fmt.Sprintf("%s IN (SELECT store_id, pack_id, destination FROM %s WHERE %s)",
		rowMember, ident(c.n.packs()), c.memberRows(version, c.hwAt(version), destination, table))
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

// packID is a member's pack identity (store_id, pack_id); the read's
// statements filter its destination.
type packID struct{ store, pack string }

// memberSet is the membership of one destination's table at a published
// version: pred, the predicate over a rows table's pack identity, and,
// when it is small (up to maxLiteralMembers), the members themselves (ids,
// sorted; listed, else pred is the membership subquery).
type memberSet struct {
	pred   string
	ids    []packID
	listed bool
}

// literalMembers is the predicate admitting the rows of exactly ids.
func literalMembers(ids []packID) string {
	if len(ids) == 0 {
		return "0"
	}
	var b strings.Builder
	b.WriteString(rowPackID + " IN (")
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + quote(id.store) + ", " + quote(id.pack) + ")")
	}
	b.WriteString(")")
	return b.String()
}

// members returns the membership of destination's table at the published
// version v (the read's statements also filter destination). A snapshot's
// membership never changes (its high-water and its removals are its own
// row and the rows below it, and no version at or below a published one
// can be published again), so a small membership is read once,
// remembered, and written as a literal list: the page's two statements
// then build no set from subqueries.
func (c *Catalog) members(ctx context.Context, v uint64, destination, table string) (memberSet, error) {
	k := memberKey{v, destination, table}
	c.pubMu.Lock()
	ms, ok := c.memberCache[k]
	c.pubMu.Unlock()
	if ok {
		return ms, nil
	}
	hw, err := c.highWater(ctx, v)
	if err != nil {
		return memberSet{}, err
	}
	// The literal high-water (a published snapshot's never changes) spares
	// the statements the scalar over the watermark.
	sub := fmt.Sprintf("%s IN (SELECT store_id, pack_id FROM %s WHERE %s)",
		rowPackID, ident(c.n.packs()), c.memberRows(u64(v), u64(hw), destination, table))
	q := fmt.Sprintf("SELECT DISTINCT store_id, pack_id FROM %s WHERE %s ORDER BY store_id, pack_id LIMIT %d",
		ident(c.n.packs()), c.memberRows(u64(v), u64(hw), destination, table), maxLiteralMembers+1)
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return memberSet{}, fmt.Errorf("reading membership of %s of %s at version %d: %w", table, destination, v, err)
	}
	if len(res.Rows) > maxLiteralMembers {
		ms = memberSet{pred: sub}
	} else {
		ms = memberSet{ids: make([]packID, 0, len(res.Rows)), listed: true}
		for _, r := range res.Rows {
			ms.ids = append(ms.ids, packID{asString(r[0]), asString(r[1])})
		}
		ms.pred = literalMembers(ms.ids)
	}
	c.pubMu.Lock()
	if c.memberCache == nil || len(c.memberCache) >= 64 {
		c.memberCache = map[memberKey]memberSet{}
	}
	c.memberCache[k] = ms
	c.pubMu.Unlock()
	return ms, nil
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
	return c.registered(ctx, ti.Name, fp)
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
