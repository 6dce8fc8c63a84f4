package catalog

import (
	"context"
	"fmt"
)

// Newest returns the newest published snapshot with its pin, or
// ErrNoSnapshot: what RetainedSnapshots' first row of a one-snapshot page
// says (the newest snapshot is always retained), in one statement.
//
// It is what every poll of the latest snapshot runs (the API's
// /api/v1/snapshots/latest and /api/v1/status, so `sluice wait`), and on
// chDB every statement waits for the one before it: RetainedSnapshots reads
// the whole pin table and the retention horizon, two statements (three
// when there is no pin, the empty result's header is asked for), where
// this reads the newest watermark row in sort-key order and that version's
// pins.
func (c *Catalog) Newest(ctx context.Context) (Snapshot, error) {
	q := fmt.Sprintf("WITH (%s) AS v, (SELECT argMax((pinned, reason), (at, pin_id)) FROM %s WHERE version = v) AS p "+
		"SELECT version, publish_id, published_at, through_lsn, new_packs, packs, p.1, p.2 FROM %s WHERE version = v LIMIT 1"+tiny,
		c.latestVersionSQL(), ident(c.n.pins()), ident(c.n.watermark()))
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading the newest snapshot: %w", err)
	}
	if len(res.Rows) == 0 {
		return Snapshot{}, fmt.Errorf("%w: nothing published yet", ErrNoSnapshot)
	}
	r := res.Rows[0]
	s := snapshotFromRow(r)
	if asUint(r[6]) == 1 {
		s.Pinned, s.PinReason = true, asString(r[7])
	}
	return s, nil
}
