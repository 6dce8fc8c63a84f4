package catalog

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/shared/packstore"
)

// Garbage collection. A member removed at version R (PublishReplace: a
// compaction or a purge) is garbage once no snapshot a read may still use
// holds it: every snapshot below R is expired as the GC horizon stands
// (the expiry horizon as it stood gc_grace ago, retention.go, so a
// continuing read of an expired snapshot is done) and none is pinned, and
// R itself was published more than gc_grace ago. Only removed members are
// ever garbage: an unpublished inventory row (the next publish may admit
// it) and a member of the latest snapshot never are, and neither is a file
// in the store with no inventory row (the indexer's reconciler indexes it;
// a compacted segment left by a killed compaction reads like the members it
// copies, so admitting it is harmless).
//
// A pass deletes, in this order, each step idempotent so that a pass
// killed anywhere is finished by the next:
//
//  1. the file of every garbage member whose file holds no other
//     inventory row that is not garbage (first, so that no moment exists
//     in which a file of garbage has no inventory row: the reconciler would
//     index it again, and once its removal's watermark row is gone a
//     publish would admit it);
//  2. the garbage members' rows in the rows tables;
//  3. their inventory rows, except those of the newest block when no other
//     row of it stays (the high-water rule, publish.go: the part holding
//     the newest block must keep a row, or a merge could drop it and the
//     engine hand its block numbers out again after a restart; the next
//     pass after a newer insert deletes them);
//  4. expired watermark rows: unpinned, below the GC horizon, not the
//     latest, and, for a row that records removals, only once none of
//     the members it removed has an inventory row left (membership reads
//     the removal sets, membership.go);
//  5. temporary files of killed writes older than gc_grace (DirStore).
//
// GC needs no fence for its safety: everything it deletes is garbage by
// facts that only grow (a removal is never undone, the horizons only rise,
// a pin it saw absent cannot make a snapshot it saw expired retained again:
// PinSnapshot refuses an expired version). The publisher runs it under its
// lease so one replica does the work.

// GCStats counts what one pass deleted.
type GCStats struct {
	Members    int // garbage (pack, destination) members whose rows and inventory rows were deleted
	Files      int // files deleted from the store
	Watermarks int // expired watermark rows deleted
	TempFiles  int // temporary files of killed writes deleted
	// Skipped counts garbage members of another store (this pass deletes
	// only from its own).
	Skipped int
}

// GCOptions tune one pass.
type GCOptions struct {
	// Grace overrides catalog.gc_grace for this pass (0: the catalog's);
	// a purge passes a tiny grace for the destination it erases.
	Grace time.Duration
	// Destination limits the pass to one destination's members ("" all).
	Destination string
	// NoWatermarks skips step 4.
	NoWatermarks bool
	// purge: a purge's pass over Destination (see garbageSQL).
	purge bool
}

// gcIgnoresRetention makes GC treat every removed member as garbage
// whatever the horizons and pins say: a test knob (negative control of the
// pinned-read test).
var gcIgnoresRetention bool

// gcMaxMembers bounds the garbage members one pass deletes: their keys
// are literals of its statements, which must stay under the engine's query
// size limit. The next pass takes the rest.
const gcMaxMembers = 1000

// Test hooks of the crash tests (nil in production): after step 1 and
// after step 2.
var gcAfterFiles, gcAfterRows func()

// gcMember is one garbage member with its inventory facts.
type gcMember struct {
	Member
	path string
	fp   string // its schema fingerprint: which generation's rows table
}

// garbageSQL is the garbage members (store_id, pack_id, destination,
// table) as a subquery over the watermark's removal sets. A purge's pass
// (o.purge) also takes every removed member of the purged destination,
// whatever the horizons (the purge expired every snapshot before its
// removal and found no pin holding the destination), and, without waiting
// for the grace, every removed member of a file that holds the purged
// destination's rows and that no retained or pinned snapshot holds.
func (c *Catalog) garbageSQL(grace time.Duration, o GCOptions) string {
	pinFloor := fmt.Sprintf("(SELECT if(count() = 0, 18446744073709551615, min(version)) FROM %s)", c.pinnedSQL())
	bound := fmt.Sprintf("least(%s, %s)", c.gcHorizonAt(grace), pinFloor)
	where := fmt.Sprintf("version <= %s AND published_at <= %s - %d", bound, nowMicros, grace.Microseconds())
	if o.purge && o.Destination != "" {
		where = fmt.Sprintf("(%s) OR r.3 = %s OR (r.2 IN (SELECT pack_id FROM %s WHERE destination = %s) AND version <= least(%s, %s))",
			where, quote(o.Destination), ident(c.n.packs()), quote(o.Destination), c.horizonSQL(), pinFloor)
	}
	if gcIgnoresRetention {
		where = "1"
	}
	sel := "SELECT r.1 AS store_id, r.2 AS pack_id, r.3 AS destination, r.4 AS table FROM " + ident(c.n.watermark()) + " ARRAY JOIN removed AS r WHERE removes > 0 AND (" + where + ")"
	if o.Destination != "" && !o.purge {
		sel += " AND r.3 = " + quote(o.Destination)
	}
	return "(" + sel + ")"
}

// gcHorizonAt is the expiry horizon as it stood grace ago.
func (c *Catalog) gcHorizonAt(grace time.Duration) string {
	return fmt.Sprintf("(SELECT maxIf(horizon, advanced_at <= %s - %d) FROM %s)", nowMicros, grace.Microseconds(), ident(c.n.retention()))
}

// CollectGarbage runs one garbage collection pass over store (see the
// comment at the top of this file) and logs what it deleted.
func (c *Catalog) CollectGarbage(ctx context.Context, store packstore.Store, o GCOptions) (GCStats, error) {
	var st GCStats
	grace := o.Grace
	if grace <= 0 {
		grace = c.gcGrace
	}
	pt := ident(c.n.packs())
	garbage := c.garbageSQL(grace, o)
	// The garbage members that still have inventory rows, with their files.
	res, err := c.conn.Query(ctx, fmt.Sprintf(`SELECT g.store_id, g.pack_id, g.destination, g.table, any(p.path), any(p.fingerprint)
		FROM %[2]s AS g INNER JOIN %[1]s AS p ON p.store_id = g.store_id AND p.pack_id = g.pack_id AND p.destination = g.destination
		GROUP BY g.store_id, g.pack_id, g.destination, g.table ORDER BY g.store_id, g.pack_id, g.destination LIMIT %[3]d`, pt, garbage, gcMaxMembers))
	if err != nil {
		return st, fmt.Errorf("collecting garbage: reading the garbage members: %w", err)
	}
	var members []gcMember
	files := map[string]string{} // pack_id -> path, of this store
	for _, r := range res.Rows {
		m := gcMember{Member: Member{StoreID: asString(r[0]), PackID: asString(r[1]), Destination: asString(r[2]), Table: asString(r[3])}, path: asString(r[4]), fp: asString(r[5])}
		if m.StoreID != store.ID() {
			st.Skipped++
			continue
		}
		members = append(members, m)
		files[m.PackID] = m.path
	}
	if len(members) > 0 {
		// 1. Files whose every inventory row is garbage.
		ids := make([]string, 0, len(files))
		for id := range files {
			ids = append(ids, quote(id))
		}
		sort.Strings(ids)
		res, err := c.conn.Query(ctx, fmt.Sprintf(`SELECT pack_id FROM %s WHERE store_id = %s AND pack_id IN (%s)
			GROUP BY pack_id HAVING countIf((store_id, pack_id, destination) NOT IN (SELECT store_id, pack_id, destination FROM %s)) = 0`,
			pt, quote(store.ID()), strings.Join(ids, ", "), garbage))
		if err != nil {
			return st, fmt.Errorf("collecting garbage: reading the files to delete: %w", err)
		}
		del, ok := store.(packstore.Deleter)
		for _, r := range res.Rows {
			path := files[asString(r[0])]
			if !ok {
				c.log.Warn("garbage collection: the store cannot delete; the file stays", "path", path)
				continue
			}
			if err := del.Delete(ctx, path); err != nil {
				return st, fmt.Errorf("collecting garbage: %w", err)
			}
			st.Files++
		}
		if gcAfterFiles != nil {
			gcAfterFiles()
		}
		// 2. Rows, per rows table (a table's generation holds the rows of
		// its schemas' packs).
		byTable := map[string][]Member{}
		var all []Member
		for _, m := range members {
			ti, err := c.registered(ctx, m.Table, m.fp)
			if err != nil {
				return st, fmt.Errorf("collecting garbage: %w", err)
			}
			rt := c.rowsTable(ti)
			byTable[rt] = append(byTable[rt], m.Member)
			all = append(all, m.Member)
		}
		tables := make([]string, 0, len(byTable))
		for t := range byTable {
			tables = append(tables, t)
		}
		sort.Strings(tables)
		for _, t := range tables {
			if err := c.conn.Exec(ctx, c.deleteSQL(t, rowMember+" IN ("+keyTuples(byTable[t])+")")); err != nil {
				return st, fmt.Errorf("collecting garbage: deleting rows of %s: %w", t, err)
			}
		}
		if gcAfterRows != nil {
			gcAfterRows()
		}
		// 3. Inventory rows, never the newest block's.
		keys := keyTuples(all)
		if err := c.conn.Exec(ctx, c.mutateDeleteSQL(pt, fmt.Sprintf(`(store_id, pack_id, destination) IN (%[1]s)
			AND (_block_number < (SELECT max(_block_number) FROM %[2]s)
				OR (SELECT count() FROM %[2]s WHERE _block_number = (SELECT max(_block_number) FROM %[2]s) AND (store_id, pack_id, destination) NOT IN (%[1]s)) > 0)`, keys, pt))); err != nil {
			return st, fmt.Errorf("collecting garbage: deleting inventory rows: %w", err)
		}
		st.Members = len(members)
	}
	// 4. Expired watermark rows.
	if !o.NoWatermarks {
		wt := ident(c.n.watermark())
		n, err := c.countAndDelete(ctx, wt, fmt.Sprintf(`version < least(%s, (SELECT if(count() = 0, 18446744073709551615, min(version)) FROM %s))
			AND version < (SELECT max(version) FROM %s)
			AND (removes = 0 OR NOT arrayExists(r -> (r.1, r.2, r.3) IN (SELECT store_id, pack_id, destination FROM %s), removed))`,
			c.gcHorizonAt(c.gcGrace), c.pinnedSQL(), wt, pt))
		if err != nil {
			return st, fmt.Errorf("collecting garbage: deleting expired watermark rows: %w", err)
		}
		st.Watermarks = n
	}
	// 5. Temporary files.
	if tc, ok := store.(interface {
		CleanTemp(context.Context, time.Duration) (int, error)
	}); ok {
		n, err := tc.CleanTemp(ctx, c.gcGrace)
		if err != nil {
			return st, fmt.Errorf("collecting garbage: %w", err)
		}
		st.TempFiles = n
	}
	if st != (GCStats{}) {
		c.log.Info("garbage collected", "members", st.Members, "files", st.Files, "watermark_rows", st.Watermarks, "temp_files", st.TempFiles, "other_store_members", st.Skipped)
	}
	return st, nil
}

// countAndDelete deletes the rows of table matching where and returns how
// many there were.
func (c *Catalog) countAndDelete(ctx context.Context, table, where string) (int, error) {
	res, err := c.conn.Query(ctx, "SELECT count() FROM "+table+" WHERE "+where)
	if err != nil {
		return 0, err
	}
	n := int(asUint(res.Rows[0][0]))
	if n == 0 {
		return 0, nil
	}
	return n, c.conn.Exec(ctx, c.mutateDeleteSQL(table, where))
}

// gcLightweight makes GC delete rows-table rows with a lightweight DELETE
// FROM instead of a mutation: the comparison of the two (BenchmarkHistory
// with SLUICE_BENCH_HISTORY_LIGHTWEIGHT).
var gcLightweight bool

// deleteSQL is the statement deleting the rows of a rows table matching
// where: a synchronous ALTER TABLE ... DELETE, which rewrites the parts
// holding them. A lightweight DELETE masks the rows at once but leaves
// them in the parts until merges drop them, and every read until then
// scans them. BenchmarkHistory at 50 flushes, one pair of runs on a loaded
// machine (noisy), after GC against a fresh catalog: lightweight page
// 0.93x, status 2.07x, snapshots 2.45x, pass 12.7 s; mutations page 1.09x,
// status 0.78x, snapshots 0.77x, pass 1.8 s.
func (c *Catalog) deleteSQL(table, where string) string {
	if gcLightweight {
		return "DELETE FROM " + table + " WHERE " + where + " SETTINGS lightweight_deletes_sync = 1"
	}
	return c.mutateDeleteSQL(table, where)
}

// keyTuples renders members as (store_id, pack_id, destination) tuples.
func keyTuples(ms []Member) string {
	var b strings.Builder
	for i, m := range ms {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + quote(m.StoreID) + ", " + quote(m.PackID) + ", " + quote(m.Destination) + ")")
	}
	return b.String()
}

// floorVersion is the version floor (rebuild.go; 0 without one): versions
// at or below it were published before a rebuild.
func (c *Catalog) floorVersion(ctx context.Context) uint64 {
	res, err := c.conn.Query(ctx, "SELECT ifNull(max(version), 0) FROM "+ident(c.n.versionFloor()))
	if err != nil || len(res.Rows) != 1 {
		return 0
	}
	return asUint(res.Rows[0][0])
}

// mutateDeleteSQL deletes from the small coordination tables (inventory,
// watermark) with a synchronous ALTER TABLE ... DELETE, which rewrites
// their parts: a lightweight delete's row mask would make every later
// max(version) or count() read the table instead of its part metadata
// (measured in BenchmarkHistory: the status and snapshots reads got 2-7x
// slower after one GC pass).
func (c *Catalog) mutateDeleteSQL(table, where string) string {
	return "ALTER TABLE " + table + " DELETE WHERE " + where + " SETTINGS mutations_sync = 1"
}
