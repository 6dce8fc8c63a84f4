package catalog

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-cdc/sluice/proto"
)

// Lease is a publisher lease: the head row of the append-only lease table.
// Expires is stamped by the catalog server's clock.
type Lease struct {
	Term    uint64    `json:"term"`
	LeaseID string    `json:"lease_id"`
	Holder  string    `json:"holder"`
	Expires time.Time `json:"expires"`
}

const nowMicros = "toUnixTimestamp64Micro(now64(6))"

// tiny are the settings of the publish path's statements, which read a few
// rows of small tables: one thread per pipeline (on a loaded machine every
// extra thread is a hand-off that waits for a core).
const tiny = " SETTINGS max_threads = 1"

// watermarkScalar is one read of the watermark for a publish at version:
// (rows at or above version, the highest through_lsn). The fence's barrier
// and the watermark statement's through_lsn use this same text, which the
// server evaluates once per statement.
func (c *Catalog) watermarkScalar(version string) string {
	return "(SELECT (countIf(version >= " + version + "), max(through_lsn)) FROM " + ident(c.n.watermark()) + ")"
}

// fence is the predicate, on the server's clock, that leaseID is the live
// head of the lease table. It is one subquery that reads the lease table
// once: the head row is taken whole (argMax of the row tuple by term), so a
// takeover cannot pair the old holder's id with the new holder's expiry.
// When version is not "", the same subquery also requires every published
// version to be below it (the version barrier, a count over the watermark)
// and the version's claims, which live in the lease table,
// to be exactly claimID's (sole claimant). An empty lease table aggregates
// to an empty head: the fence fails.
func (c *Catalog) fence(leaseID, version, claimID string) string {
	if c.noFence {
		return "1"
	}
	cond, cols := "h.1 = "+quote(leaseID)+" AND h.2 > "+nowMicros, "argMax((lease_id, expires_at), (term, lease_id)) AS h"
	if version != "" {
		cols += ", groupArrayIf(claim_id, version = " + version + ") AS claims"
		cond += " AND claims = [" + quote(claimID) + "] AND " + c.watermarkScalar(version) + ".1 = 0"
	}
	return fmt.Sprintf("(SELECT toUInt8(%s) FROM (SELECT %s FROM %s)) = 1", cond, cols, ident(c.n.lease()))
}

// readHead returns the lease rows at or above term (all rows when term is
// 0), newest first, and the server clock.
func (c *Catalog) readHead(ctx context.Context, term uint64, limit int) ([]Lease, time.Time, error) {
	q := fmt.Sprintf("SELECT term, lease_id, holder, expires_at, %s FROM %s WHERE term >= %d ORDER BY term DESC, lease_id DESC LIMIT %d",
		nowMicros, ident(c.n.lease()), term, limit)
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("reading publisher lease: %w", err)
	}
	var out []Lease
	var now time.Time
	for _, r := range res.Rows {
		out = append(out, Lease{Term: asUint(r[0]), LeaseID: asString(r[1]), Holder: asString(r[2]), Expires: time.UnixMicro(asInt(r[3])).UTC()})
		now = time.UnixMicro(asInt(r[4])).UTC()
	}
	if len(out) == 0 {
		res, err := c.conn.Query(ctx, "SELECT "+nowMicros)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("reading server clock: %w", err)
		}
		now = time.UnixMicro(asInt(res.Rows[0][0])).UTC()
	}
	return out, now, nil
}

// alone reports whether the rows read at or above a term are exactly one,
// and it is leaseID's.
func alone(rows []Lease, leaseID string) (Lease, bool) {
	if len(rows) == 1 && rows[0].LeaseID == leaseID {
		return rows[0], true
	}
	return Lease{}, false
}

// AcquireLease takes the publisher lease by append-and-read-back: it
// appends a claim at a term above the head (only if no single live lease
// holds the head, judged by the server), then reads back every row at or
// above its term; it holds the lease only if its row is alone there. Two
// claimants of one term both see two rows and both abandon it. It returns
// ErrLeaseHeld while another holder's lease is live.
func (c *Catalog) AcquireLease(ctx context.Context, holder string, ttl time.Duration) (Lease, error) {
	id := uuid.NewString()
	lt := c.n.lease()
	for attempt := 0; attempt < 8; attempt++ {
		head, now, err := c.readHead(ctx, 0, 2)
		if err != nil {
			return Lease{}, err
		}
		var top uint64
		if len(head) > 0 {
			top = head[0].Term
			contested := len(head) == 2 && head[1].Term == top
			if !contested && head[0].Expires.After(now) {
				return Lease{}, fmt.Errorf("%w: %s holds term %d until %s (server clock)", ErrLeaseHeld, head[0].Holder, top, head[0].Expires.Format(time.RFC3339Nano))
			}
		}
		term := top + 1 + uint64(rand.IntN(8*attempt+1))
		q := fmt.Sprintf(`INSERT INTO %s (term, lease_id, holder, acquired_at, expires_at)
			SELECT %d, %s, %s, %s, %s + %d
			WHERE (SELECT count() FROM %s WHERE term = (SELECT max(term) FROM %s) AND expires_at > %s) != 1`,
			ident(lt), term, quote(id), quote(holder), nowMicros, nowMicros, ttl.Microseconds(),
			ident(lt), ident(lt), nowMicros)
		if err := c.conn.Exec(ctx, q); err != nil {
			return Lease{}, fmt.Errorf("claiming publisher lease: %w", err)
		}
		rows, _, err := c.readHead(ctx, term, 3)
		if err != nil {
			return Lease{}, err
		}
		if l, ok := alone(rows, id); ok {
			c.log.Info("publisher lease acquired", "term", l.Term, "lease_id", l.LeaseID, "holder", holder)
			return l, nil
		}
		if len(rows) > 0 && rows[0].LeaseID != id && !containsLease(rows, id) && rows[0].Expires.After(now) {
			// Our claim was refused by the server: someone holds it.
			return Lease{}, fmt.Errorf("%w: %s claimed term %d first", ErrLeaseHeld, rows[0].Holder, rows[0].Term)
		}
		// Contested (or refused): try again above it, with jitter.
	}
	return Lease{}, fmt.Errorf("%w: every term tried was contested", ErrLeaseHeld)
}

func containsLease(rows []Lease, id string) bool {
	for _, r := range rows {
		if r.LeaseID == id {
			return true
		}
	}
	return false
}

// RenewLease extends l by appending its next term, fenced: the row is
// written only while l is the live head. It returns ErrLeaseLost otherwise.
func (c *Catalog) RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	if err := c.conn.Exec(ctx, c.renewSQL(l, ttl, 0, "")); err != nil {
		return l, fmt.Errorf("renewing publisher lease: %w", err)
	}
	head, now, err := c.readHead(ctx, l.Term+1, 2)
	if err != nil {
		return l, err
	}
	if len(head) == 0 || head[0].LeaseID != l.LeaseID || (len(head) == 2 && head[1].Term == head[0].Term) || !head[0].Expires.After(now) {
		return l, c.lost(l, head)
	}
	return head[0], nil
}

// renewSQL appends l's next term with a fresh expiry, fenced: the head row
// is read once (one subquery on the lease table), and the new row is
// written only when that head is l's and live by the server clock; its term
// is the head's plus one. A publish's renewal also carries its version
// claim (version, claimID); a plain renewal claims nothing (version 0).
// With the fence off (negative control) the row is written whatever the
// head.
func (c *Catalog) renewSQL(l Lease, ttl time.Duration, version uint64, claimID string) string {
	cond := "h.1 = " + quote(l.LeaseID) + " AND h.2 > " + nowMicros
	if c.noFence {
		cond = "1"
	}
	return fmt.Sprintf(`INSERT INTO %[1]s (term, lease_id, holder, acquired_at, expires_at, version, claim_id)
		SELECT h.3 + 1, %[2]s, %[3]s, %[4]s, %[4]s + %[5]d, %[6]d, %[7]s
		FROM (SELECT argMax((lease_id, expires_at, term), (term, lease_id)) AS h FROM %[1]s)
		WHERE %[8]s`+tiny,
		ident(c.n.lease()), quote(l.LeaseID), quote(l.Holder), nowMicros, ttl.Microseconds(), version, quote(claimID), cond)
}

func (c *Catalog) lost(l Lease, head []Lease) error {
	if len(head) == 0 {
		return fmt.Errorf("%w: lease %s (term %d) is no longer the head", ErrLeaseLost, l.LeaseID, l.Term)
	}
	return fmt.Errorf("%w: lease %s (term %d) was superseded by %s at term %d", ErrLeaseLost, l.LeaseID, l.Term, head[0].Holder, head[0].Term)
}

// ReleaseLease gives the lease up by appending an expired head row, fenced
// like a renewal, so a stale holder can never release a successor's lease.
func (c *Catalog) ReleaseLease(ctx context.Context, l Lease) error {
	lt := ident(c.n.lease())
	q := fmt.Sprintf(`INSERT INTO %s (term, lease_id, holder, acquired_at, expires_at)
		SELECT (SELECT max(term) FROM %s) + 1, %s, '', %s, 0 WHERE %s`,
		lt, lt, quote(uuid.NewString()), nowMicros, c.fence(l.LeaseID, "", ""))
	if err := c.conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("releasing publisher lease: %w", err)
	}
	return nil
}

// nextVersion returns the version a publish attempt claims: above every
// version claimed or published, as last seen (one query when nothing is
// known yet). A stale guess is harmless: the claim is checked inside the
// publishing statements (sole claimant, above every published version), and
// the read-back refreshes what is known.
func (c *Catalog) nextVersion(ctx context.Context, attempt int) (uint64, error) {
	c.pubMu.Lock()
	top, known := c.pubTop, c.pubKnown
	c.pubMu.Unlock()
	if !known {
		res, err := c.conn.Query(ctx, fmt.Sprintf("SELECT greatest((SELECT ifNull(max(version), 0) FROM %s), (SELECT ifNull(max(version), 0) FROM %s))",
			ident(c.n.lease()), ident(c.n.watermark())))
		if err != nil {
			return 0, fmt.Errorf("reading the highest catalog version: %w", err)
		}
		top = asUint(res.Rows[0][0])
	}
	return top + 1 + uint64(rand.IntN(8*(attempt-1)+1)), nil
}

// seen records what a read-back said: the highest version claimed or
// published.
func (c *Catalog) seen(top uint64) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	if !c.pubKnown || top > c.pubTop {
		c.pubTop = top
	}
	c.pubKnown = true
}

// PublishResult describes a successful publish.
type PublishResult struct {
	Snapshot Snapshot
	Attempts int
	Lease    Lease // the lease as the publish left it (renewed)
}

// Publish publishes the next snapshot: every indexed pack not yet a member
// (within the publish window, see unpublished), and through_lsn (never
// below the previous snapshot's). Each attempt renews the lease and claims a
// version in one fenced append to the lease table (the renewal row carries
// the claim; it is written only while l is the live head), writes the
// manifest rows and then the watermark row with a fresh publish_id — each an
// INSERT ... SELECT carrying the lease fence, the sole-claim check and the
// version barrier in one subquery, on the server's clock — and reads back,
// in one query, the version's publishes, the lease head and the highest
// versions. The renewal is liveness (the fence then runs with a whole TTL
// left); the fence in each statement is the safety. A lost version is
// retried higher; a lost lease returns ErrLeaseLost (stop publishing,
// acquire again); a version published twice returns ErrPublishConflict.
//
// Statements per publish: renewal-and-claim, manifest, watermark, read-back
// (plus one version query the first time).
func (c *Catalog) Publish(ctx context.Context, l Lease, ttl time.Duration, through proto.LSN) (PublishResult, error) {
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
		unpublished, full := c.unpublished()
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
		head, now, mine, foreign, snap, err := c.readBack(ctx, v, pid)
		if err != nil {
			return PublishResult{Lease: l}, err
		}
		live := len(head) > 0 && head[0].LeaseID == l.LeaseID && head[0].Expires.After(now) && !(len(head) == 2 && head[1].Term == head[0].Term)
		if live {
			l = head[0]
		}
		switch {
		case mine && foreign == "":
			c.publishedAt(snap, full)
			return PublishResult{Snapshot: snap, Attempts: attempt, Lease: l}, nil
		case mine:
			return PublishResult{Lease: l}, fmt.Errorf("%w: version %d holds publish %s beside this publish %s", ErrPublishConflict, v, foreign, pid)
		case !live:
			// Nothing of ours is visible and the lease is gone: stop.
			return PublishResult{Lease: l}, c.lost(l, head)
		}
		c.log.Debug("publish lost its version, retrying higher", "version", v)
	}
	return PublishResult{Lease: l}, fmt.Errorf("%w: gave up after 8 attempts", ErrVersionRace)
}

// readBack reads, in one query, what a publish attempt at version v left:
// the version's publishes (pid's snapshot, and a foreign publish_id if
// any), the lease head (two rows, to see a contested term), the server
// clock, and the highest claimed or published version (remembered for the
// next attempt). It reads the watermark once (the version's rows, the pack
// count through v and the highest version, in one aggregate) and the lease
// table twice.
func (c *Catalog) readBack(ctx context.Context, v uint64, pid string) (head []Lease, now time.Time, mine bool, foreign string, snap Snapshot, err error) {
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
			if asString(r[1]) != "" { // an empty array joins as one empty row
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

// Pending counts indexed packs that no published snapshot holds yet,
// within the same window a publish reads (see unpublished): every pack when
// a sweep is due.
func (c *Catalog) Pending(ctx context.Context) (uint64, error) {
	unpublished, _ := c.unpublished()
	q := fmt.Sprintf("SELECT count(DISTINCT store_id, pack_id) FROM %s WHERE %s", ident(c.n.packs()), unpublished) + tiny
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("counting unpublished packs: %w", err)
	}
	return asUint(res.Rows[0][0]), nil
}

// Publish window. A publish admits the inventory rows indexed (server
// clock) at or after the last known publish minus publishSlack, and checks
// them against the memberships of snapshots published at or after that
// publish minus twice the slack, so its cost follows recent packs rather
// than the whole history. A pack whose inventory row became visible more
// than publishSlack after its indexed_at stamp (a stalled insert, a server
// clock stepped back) falls outside the window: a full sweep, which reads
// every pack against every membership, runs on a catalog handle's first
// publish and then at least every sweepEvery, so such a pack is late, never
// lost.
const (
	publishSlack = 30 * time.Second
	sweepEvery   = 5 * time.Minute
)

// unpublished returns the predicate, over the inventory, of packs no
// published snapshot holds, and whether it is the full sweep.
func (c *Catalog) unpublished() (string, bool) {
	mt, wt := ident(c.n.manifest()), ident(c.n.watermark())
	c.pubMu.Lock()
	last, swept := c.lastPubAt, c.sweptAt
	c.pubMu.Unlock()
	due := swept.IsZero() || time.Since(swept) >= sweepEvery
	if c.noWindow || last == 0 || (due && !c.noSweep) {
		return fmt.Sprintf("(store_id, pack_id) NOT IN (SELECT store_id, pack_id FROM %s WHERE (version, publish_id) IN (SELECT version, publish_id FROM %s))",
			mt, wt), true
	}
	slack := publishSlack.Microseconds()
	if c.slack > 0 {
		slack = c.slack.Microseconds()
	}
	// The IN set on (version, publish_id), the manifest's sort-key prefix,
	// also prunes the manifest read to the window's snapshots.
	return fmt.Sprintf("indexed_at >= %d AND (store_id, pack_id) NOT IN (SELECT store_id, pack_id FROM %s WHERE (version, publish_id) IN (SELECT version, publish_id FROM %s WHERE published_at >= %d))",
		last-slack, mt, wt, last-2*slack), false
}

// publishedAt records a successful publish: its server-clock time anchors the
// next window, and a full sweep restarts the sweep interval.
func (c *Catalog) publishedAt(s Snapshot, full bool) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	c.lastPubAt = s.PublishedAt.UnixMicro() // follows the server clock, even back
	if full {
		c.sweptAt = time.Now()
	}
}
