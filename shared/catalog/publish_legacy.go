package catalog

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-cdc/sluice/proto"
)

// The schema version 2 publish, kept only as the baseline of the A/B
// benchmark (BenchmarkPublish/v2-four-statements) behind the unexported
// legacyPublish knob: a manifest MergeTree table written by its own fenced
// INSERT ... SELECT, then the watermark row by another, then the read-back —
// four statements with the renewal. Production never takes this path.

// legacyDDL swaps the version 3 watermark (members in the row) and manifest
// view for the version 2 tables.
func legacyDDL(n names, ddl []string) []string {
	out := make([]string, 0, len(ddl))
	for _, q := range ddl {
		switch {
		case strings.HasPrefix(q, "CREATE TABLE IF NOT EXISTS "+ident(n.watermark())):
			out = append(out, "CREATE TABLE IF NOT EXISTS "+ident(n.manifest())+` (
			version UInt64, publish_id String, store_id String, pack_id String, destination String, table String)
			ENGINE = MergeTree ORDER BY (version, publish_id, store_id, pack_id)`,
				"CREATE TABLE IF NOT EXISTS "+ident(n.watermark())+` (
			version UInt64, publish_id String, published_at Int64, through_lsn UInt64, new_packs UInt64,
			lease_id String, holder String) ENGINE = MergeTree ORDER BY (version, publish_id)`)
		case strings.HasPrefix(q, "CREATE OR REPLACE VIEW "+ident(n.manifest())):
		default:
			out = append(out, q)
		}
	}
	return out
}

// legacyUnpublished is the version 2 unpublished predicate: manifest rows
// paired with watermark rows.
func legacyUnpublished(mt, wt string, full bool, last, slack int64) string {
	if full {
		return fmt.Sprintf("(store_id, pack_id) NOT IN (SELECT store_id, pack_id FROM %s WHERE (version, publish_id) IN (SELECT version, publish_id FROM %s))",
			mt, wt)
	}
	return fmt.Sprintf("indexed_at >= %d AND (store_id, pack_id) NOT IN (SELECT store_id, pack_id FROM %s WHERE (version, publish_id) IN (SELECT version, publish_id FROM %s WHERE published_at >= %d))",
		last-slack, mt, wt, last-2*slack)
}

// publishLegacy is the version 2 Publish: renewal-and-claim, manifest,
// watermark, read-back.
func (c *Catalog) publishLegacy(ctx context.Context, l Lease, ttl time.Duration, through proto.LSN) (PublishResult, error) {
	mt, wt, pt := ident(c.n.manifest()), ident(c.n.watermark()), ident(c.n.packs())
	for attempt := 1; attempt <= 8; attempt++ {
		v, err := c.nextVersion(ctx, attempt)
		if err != nil {
			return PublishResult{Lease: l}, err
		}
		cid := uuid.NewString()
		if err := c.conn.Exec(ctx, c.renewSQL(l, ttl, v, cid)); err != nil {
			return PublishResult{Lease: l}, fmt.Errorf("renewing publisher lease and claiming catalog version %d: %w", v, err)
		}
		if c.beforeStatements != nil {
			c.beforeStatements()
		}
		pid := uuid.NewString()
		fence := c.fence(l.LeaseID, u64(v), cid)
		_, unpublished, full := c.unpublished("")
		q := fmt.Sprintf(`INSERT INTO %s (version, publish_id, store_id, pack_id, destination, table)
			SELECT %d, %s, store_id, pack_id, any(destination), any(table) FROM %s
			WHERE %s
			AND %s
			GROUP BY store_id, pack_id`+tiny,
			mt, v, quote(pid), pt, unpublished, fence)
		if err := c.conn.Exec(ctx, q); err != nil {
			return PublishResult{Lease: l}, fmt.Errorf("publishing version %d: writing manifest: %w", v, err)
		}
		q = fmt.Sprintf(`INSERT INTO %s (version, publish_id, published_at, through_lsn, new_packs, lease_id, holder)
			SELECT %d, %s, %s, greatest(toUInt64(%d), %s.2),
			(SELECT count() FROM %s WHERE version = %d AND publish_id = %s), %s, %s
			WHERE %s`+tiny,
			wt, v, quote(pid), nowMicros, uint64(through), c.watermarkScalar(u64(v)), mt, v, quote(pid), quote(l.LeaseID), quote(l.Holder), fence)
		if err := c.conn.Exec(ctx, q); err != nil {
			return PublishResult{Lease: l}, fmt.Errorf("publishing version %d: writing watermark: %w", v, err)
		}
		res, done, err := c.settle(ctx, l, v, pid, full, attempt)
		if done || err != nil {
			return res, err
		}
		l = res.Lease
		c.log.Debug("publish lost its version, retrying higher", "version", v)
	}
	return PublishResult{Lease: l}, fmt.Errorf("%w: gave up after 8 attempts", ErrVersionRace)
}

// readBackLegacy is the version 2 read-back: three UNION ALL branches, the
// lease table read twice.
func (c *Catalog) readBackLegacy(ctx context.Context, v uint64, pid string) (head []Lease, now time.Time, mine bool, foreign string, snap Snapshot, err error) {
	wt, lt := ident(c.n.watermark()), ident(c.n.lease())
	res, err := c.conn.Query(ctx, fmt.Sprintf(`SELECT 'w', p.1, '', p.2, p.3, p.4, s, m
		FROM (SELECT groupArrayIf((publish_id, published_at, through_lsn, new_packs), version = %[2]d) AS a, sumIf(new_packs, version <= %[2]d) AS s, max(version) AS m FROM %[1]s)
		LEFT ARRAY JOIN a AS p
		UNION ALL SELECT 'l', lease_id, holder, expires_at, term, toUInt64(0), toUInt64(0), toUInt64(0) FROM (SELECT term, lease_id, holder, expires_at FROM %[3]s ORDER BY term DESC, lease_id DESC LIMIT 2)
		UNION ALL SELECT 'c', '', '', %[4]s, toUInt64(0), toUInt64(0), toUInt64(0), max(version) FROM %[3]s`+tiny,
		wt, v, lt, nowMicros))
	if err != nil {
		return nil, now, false, "", snap, fmt.Errorf("publishing version %d: reading back: %w", v, err)
	}
	var top, packs uint64
	var w [][]any
	for _, r := range res.Rows {
		switch asString(r[0]) {
		case "w":
			packs = asUint(r[6])
			top = max(top, asUint(r[7]))
			if asString(r[1]) != "" {
				w = append(w, r)
			}
		case "l":
			head = append(head, Lease{Term: asUint(r[4]), LeaseID: asString(r[1]), Holder: asString(r[2]), Expires: time.UnixMicro(asInt(r[3])).UTC()})
		case "c":
			now = time.UnixMicro(asInt(r[3])).UTC()
			top = max(top, asUint(r[7]))
		}
	}
	sort.Slice(head, func(i, j int) bool {
		if head[i].Term != head[j].Term {
			return head[i].Term > head[j].Term
		}
		return head[i].LeaseID > head[j].LeaseID
	})
	for _, r := range w {
		if id := asString(r[1]); id == pid {
			mine = true
			snap = snapshotFromRow([]any{v, id, r[3], r[4], r[5], packs})
		} else {
			foreign = id
		}
	}
	c.seen(top)
	return head, now, mine, foreign, snap, nil
}

// settleLegacy is the version 2 settle: one read-back of the watermark and
// the lease table, whatever the outcome.
func (c *Catalog) settleLegacy(ctx context.Context, l Lease, v uint64, pid string, full bool, attempt int) (PublishResult, bool, error) {
	head, now, mine, foreign, snap, err := c.readBackLegacy(ctx, v, pid)
	if err != nil {
		return PublishResult{Lease: l}, true, err
	}
	live := len(head) > 0 && head[0].LeaseID == l.LeaseID && head[0].Expires.After(now) && !(len(head) == 2 && head[1].Term == head[0].Term)
	if live {
		l = head[0]
	}
	switch {
	case mine && foreign == "":
		c.publishedAt(snap, full)
		return PublishResult{Snapshot: snap, Attempts: attempt, Lease: l}, true, nil
	case mine:
		return PublishResult{Lease: l}, true, fmt.Errorf("%w: version %d holds publish %s beside this publish %s", ErrPublishConflict, v, foreign, pid)
	case !live:
		return PublishResult{Lease: l}, true, c.lost(l, head)
	}
	return PublishResult{Lease: l}, false, nil
}
