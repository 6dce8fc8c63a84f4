package catalog

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
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

// tiny are the settings of the statements that read a few rows of small
// coordination tables (the watermark, lease, pins, retention and version
// floor; never a rows table): the publish path's, and the snapshot and
// status reads (Latest, Snapshot, RetainedSnapshots, Pins, a read's version
// check). One thread per pipeline: on a loaded machine every extra thread
// is a hand-off that waits for a core.
const tiny = " SETTINGS max_threads = 1"

// watermarkScalar is one read of the watermark for a publish at version:
// (rows at or above version, the highest through_lsn). The fence's barrier
// and the watermark statement's through_lsn use this same text, which the
// server evaluates once per statement.
func (c *Catalog) watermarkScalar(version string) string {
	return "(SELECT (countIf(version >= " + version + "), max(through_lsn)) FROM " + ident(c.n.watermark()) + ")"
}

// publishWatermarkScalar is watermarkScalar for the publish statement, with
// a third element: the latest snapshot's member count (packs), from which
// the row records its own, and a fourth: the latest inventory high-water
// (see "The admitted set"). The high-water and through_lsn only rise, so
// the latest row holds both maxima: only the rows at the latest version are
// read (none when nothing is published: the scalar's default is 0, and
// every row, none, is read). The version barrier holds: a version at or
// above this one is published exactly when the latest is.
func (c *Catalog) publishWatermarkScalar(version uint64) string {
	wt := ident(c.n.watermark())
	return fmt.Sprintf("(SELECT (countIf(version >= %d), max(through_lsn), argMax(packs, version), max(inventory_block)) FROM %s WHERE version >= (%s))", version, wt, c.latestVersionSQL())
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

// leaseScalar is one read of the lease table for a publish at version:
// (ok, head term, head expiry), ok 1 only when leaseID is the live head on
// the server's clock and claimID is the version's sole claim.
func (c *Catalog) leaseScalar(leaseID string, version uint64, claimID string) string {
	return fmt.Sprintf("(SELECT (toUInt8(h.1 = %s AND h.2 > %s AND claims = [%s]), h.3, h.2) FROM (SELECT argMax((lease_id, expires_at, term), (term, lease_id)) AS h, groupArrayIf(claim_id, version = %d) AS claims FROM %s))",
		quote(leaseID), nowMicros, quote(claimID), version, ident(c.n.lease()))
}

// publishCond is the fence of the publish statement over its two scalars
// (f: leaseScalar, w: watermarkScalar): the lease is the live head with
// the sole claim, and no version at or above this one is published. With
// the fence off (negative control) it is true.
func (c *Catalog) publishCond() string {
	if c.noFence {
		return "1"
	}
	return "f.1 = 1 AND w.1 = 0"
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

// ReleaseInstanceLease releases the publisher lease when its live head
// is held by the process instance named instance or one of its services
// (holder instance or instance + "/" + service), and reports whether it
// did. Like state.Leases.ReleaseInstance, only a caller that has proven
// that process dead may call it; the release itself is fenced like
// ReleaseLease, so it can never release a successor's lease.
func (c *Catalog) ReleaseInstanceLease(ctx context.Context, instance string) (bool, error) {
	if instance == "" || strings.Contains(instance, "/") {
		return false, fmt.Errorf("releasing the publisher lease of an instance: instance %q is empty or holds a '/'", instance)
	}
	head, now, err := c.readHead(ctx, 0, 1)
	if err != nil {
		return false, err
	}
	if len(head) == 0 || !head[0].Expires.After(now) {
		return false, nil
	}
	if h := head[0].Holder; h != instance && !strings.HasPrefix(h, instance+"/") {
		return false, nil
	}
	return true, c.ReleaseLease(ctx, head[0])
}

// nextVersion returns the version a publish attempt claims: above every
// version claimed or published, as last seen, and above every version
// published before a rebuild (the version floor; one query when nothing is
// known yet). A stale guess is harmless: the claim is checked inside the
// publishing statements (sole claimant, above every published version), and
// the read-back refreshes what is known.
func (c *Catalog) nextVersion(ctx context.Context, attempt int) (uint64, error) {
	c.pubMu.Lock()
	top, known := c.pubTop, c.pubKnown
	c.pubMu.Unlock()
	if !known {
		res, err := c.conn.Query(ctx, fmt.Sprintf("SELECT greatest((SELECT ifNull(max(version), 0) FROM %s), (SELECT ifNull(max(version), 0) FROM %s), (SELECT ifNull(max(version), 0) FROM %s))",
			ident(c.n.lease()), ident(c.n.watermark()), ident(c.n.versionFloor())))
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

// Member is one member of a snapshot: a (pack, destination) inventory row
// (a per-destination pack is one, a segment one per destination it holds)
// and the table its rows belong to.
type Member struct {
	StoreID     string `json:"store_id"`
	PackID      string `json:"pack_id"`
	Destination string `json:"destination"`
	Table       string `json:"table"`
}

// Publish publishes the next snapshot: every indexed pack not yet a member
// (every inventory row its statement sees above the latest high-water, see
// "The admitted set"), and through_lsn (never below the previous
// snapshot's). Each attempt is three statements:
//
//  1. renewal-and-claim: one fenced append to the lease table renews the
//     lease and claims a version (the renewal row carries the claim; it is
//     written only while l is the live head);
//  2. the publish: one INSERT ... SELECT of one watermark row that records
//     the snapshot's inventory high-water (its membership: every inventory
//     row at or below it), its member count and a fresh publish_id,
//     written only if the statement finds, on the server's clock, that l
//     is the live head, that claimID is the version's sole claim (one read
//     of the lease table) and that no version at or above it is published
//     (one read of the watermark) -- the fence; the row also records the
//     head's term and expiry, which are this publish's own renewal;
//  3. one read-back query over the watermark: the version's publishes, the
//     pack count and the highest version. Only a publish that is not alone
//     at its version (lost, or a conflict) also reads the lease table.
//
// The renewal is liveness (the fence then runs with a whole TTL left); the
// fence is the safety. Membership and watermark are one row of one part:
// they are written together or not at all. A lost version is retried
// higher; a lost lease returns ErrLeaseLost (stop publishing, acquire
// again); a version published twice returns ErrPublishConflict. The first
// publish of a handle also reads the highest version (one query).
func (c *Catalog) Publish(ctx context.Context, l Lease, ttl time.Duration, through proto.LSN) (PublishResult, error) {
	return c.publish(ctx, l, ttl, through, nil, false)
}

// PublishReplace is a compaction's or a purge's publish: fenced like
// Publish (the same lease fence, version claim, barrier and read-back), it
// admits every visible inventory row as Publish does and records removed,
// members of the latest snapshot that this snapshot and every later one no
// longer hold. Its through_lsn is the previous snapshot's: a compaction
// claims nothing new. It refuses (ErrNotMember) to remove a member the
// latest snapshot does not hold, checked before each attempt and again
// inside the publishing statement, against the snapshot the version
// barrier proves it follows (so a replacement published between the two
// is caught there, and the retry's check names it). removed must not be
// empty nor list a member twice.
func (c *Catalog) PublishReplace(ctx context.Context, l Lease, ttl time.Duration, removed []Member) (PublishResult, error) {
	if len(removed) == 0 {
		return PublishResult{Lease: l}, fmt.Errorf("publishing a replacement: no members to remove")
	}
	seen := map[Member]bool{}
	for _, m := range removed {
		if seen[m] {
			return PublishResult{Lease: l}, fmt.Errorf("publishing a replacement: member %s/%s of %s (table %s) is listed twice", m.StoreID, m.PackID, m.Destination, m.Table)
		}
		seen[m] = true
	}
	return c.publish(ctx, l, ttl, 0, removed, true)
}

// publish is Publish and, with replace, PublishReplace.
func (c *Catalog) publish(ctx context.Context, l Lease, ttl time.Duration, through proto.LSN, removed []Member, replace bool) (PublishResult, error) {
	wt, pt := ident(c.n.watermark()), ident(c.n.packs())
	for attempt := 1; attempt <= 8; attempt++ {
		if replace && !c.noRemovalCheck {
			if err := c.checkRemovable(ctx, removed); err != nil {
				return PublishResult{Lease: l}, err
			}
		}
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
		// Two scalars, each named once in WITH and so evaluated once: the
		// lease head (is it this publisher's, live on the server clock, with
		// this publish's sole claim; its term and expiry, which this row
		// records: the head is this publish's own renewal) and the
		// watermark (the version barrier, the highest through_lsn, the
		// latest member count and high-water). The statement reads the
		// inventory rows above the latest high-water only: b, the highest
		// block among them, is the new high-water (every visible row is at
		// or below it), n the members they add.
		window := "_block_number > w.4"
		hw := "greatest(w.4, b)"
		if c.clockWindow {
			// Negative control: the high-water is the highest block among
			// the rows stamped within the clock window, not the highest the
			// statement sees.
			c.pubMu.Lock()
			last := c.lastPubAt
			c.pubMu.Unlock()
			if last > 0 {
				window += fmt.Sprintf(" AND indexed_at >= %d", last-publishSlack.Microseconds())
			}
		}
		cols := "version, publish_id, published_at, through_lsn, new_packs, packs, lease_id, holder, lease_term, lease_expires, inventory_block"
		vals := fmt.Sprintf("%d, %s, %s, greatest(toUInt64(%d), w.2), n, w.3 + n, %s, %s, f.2, f.3, %s",
			v, quote(pid), nowMicros, uint64(through), quote(l.LeaseID), quote(l.Holder), hw)
		cond := c.publishCond()
		if replace {
			lit := memberTuples(removed)
			cols += ", removes, removed"
			vals = fmt.Sprintf("%d, %s, %s, w.2, n, w.3 + n - %d, %s, %s, f.2, f.3, %s, %d, [%s]",
				v, quote(pid), nowMicros, len(removed), quote(l.LeaseID), quote(l.Holder), hw, len(removed), lit)
			// Every member removed is a member of the latest snapshot (at or
			// below its high-water, not removed before), as this statement
			// sees it; the barrier makes that snapshot the one this publish
			// follows.
			if !c.noRemovalCheck {
				cond += fmt.Sprintf(" AND (SELECT count() FROM (SELECT DISTINCT store_id, pack_id, destination, table FROM %s WHERE _block_number <= w.4 AND (store_id, pack_id, destination, table) IN (%s) AND (store_id, pack_id, destination) NOT IN %s)) = %d",
					pt, lit, c.removedSet(""), len(removed))
			}
		}
		q := fmt.Sprintf(`INSERT INTO %[1]s (%[2]s)
			WITH %[3]s AS f, %[4]s AS w
			SELECT %[5]s
			FROM (SELECT count(DISTINCT store_id, pack_id, destination) AS n, max(_block_number) AS b FROM %[6]s WHERE %[7]s)
			WHERE %[8]s`+tiny,
			wt, cols, c.leaseScalar(l.LeaseID, v, cid), c.publishWatermarkScalar(v), vals, pt, window, cond)
		if err := c.conn.Exec(ctx, q); err != nil {
			return PublishResult{Lease: l}, fmt.Errorf("publishing version %d: %w", v, err)
		}
		res, done, err := c.settle(ctx, l, v, pid, attempt)
		if done || err != nil {
			return res, err
		}
		l = res.Lease
		c.log.Debug("publish lost its version, retrying higher", "version", v)
	}
	return PublishResult{Lease: l}, fmt.Errorf("%w: gave up after 8 attempts", ErrVersionRace)
}

// memberTuples renders members as SQL tuples (store_id, pack_id,
// destination, table), comma separated.
func memberTuples(ms []Member) string {
	var b strings.Builder
	for i, m := range ms {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + quote(m.StoreID) + ", " + quote(m.PackID) + ", " + quote(m.Destination) + ", " + quote(m.Table) + ")")
	}
	return b.String()
}

// checkRemovable returns ErrNotMember unless every member of removed is a
// member of the latest snapshot.
func (c *Catalog) checkRemovable(ctx context.Context, removed []Member) error {
	latest, err := c.Latest(ctx)
	if err != nil {
		return fmt.Errorf("publishing a replacement: %w", err)
	}
	have, err := c.Members(ctx, latest.Version, "", "")
	if err != nil {
		return fmt.Errorf("publishing a replacement: %w", err)
	}
	in := make(map[Member]bool, len(have))
	for _, m := range have {
		in[m] = true
	}
	for _, m := range removed {
		if !in[m] {
			return fmt.Errorf("%w: pack %s of store %s, destination %s, table %s is not a member of the latest snapshot %d", ErrNotMember, m.PackID, m.StoreID, m.Destination, m.Table, latest.Version)
		}
	}
	return nil
}

// settle reads back what a publish attempt at version v (publish pid) left
// and decides: published (done, nil), a conflict or a lost lease (done,
// error), or a lost version to retry higher (not done). A publish that is
// alone at its version needs one query (the watermark); anything else also
// reads the lease head.
func (c *Catalog) settle(ctx context.Context, l Lease, v uint64, pid string, attempt int) (PublishResult, bool, error) {
	mine, foreign, snap, lease, err := c.readBack(ctx, v, pid)
	if err != nil {
		return PublishResult{Lease: l}, true, err
	}
	if mine && foreign == "" {
		if lease.Term > 0 { // 0 only with the fence off (negative control)
			l.Term, l.Expires = lease.Term, lease.Expires
		}
		c.publishedAt(snap)
		return PublishResult{Snapshot: snap, Attempts: attempt, Lease: l}, true, nil
	}
	head, now, err := c.readLease(ctx, v)
	if err != nil {
		return PublishResult{Lease: l}, true, err
	}
	live := len(head) > 0 && head[0].LeaseID == l.LeaseID && head[0].Expires.After(now) && !(len(head) == 2 && head[1].Term == head[0].Term)
	if live {
		l = head[0]
	}
	switch {
	case mine:
		return PublishResult{Lease: l}, true, fmt.Errorf("%w: version %d holds publish %s beside this publish %s", ErrPublishConflict, v, foreign, pid)
	case !live:
		// Nothing of ours is visible and the lease is gone: stop.
		return PublishResult{Lease: l}, true, c.lost(l, head)
	}
	return PublishResult{Lease: l}, false, nil
}

// readBack reads, in one query over the watermark, what a publish attempt
// at version v left: the rows at or above v (a range of the sort key): the
// version's publishes (pid's snapshot, and a foreign publish_id if any),
// the lease term and expiry pid's row recorded (its own renewal, the head
// its fence passed on), and the highest published version (remembered for
// the next attempt). The row carries the snapshot's cumulative pack count,
// so nothing below v is read.
func (c *Catalog) readBack(ctx context.Context, v uint64, pid string) (mine bool, foreign string, snap Snapshot, lease Lease, err error) {
	res, err := c.conn.Query(ctx, fmt.Sprintf(`SELECT version, publish_id, published_at, through_lsn, new_packs, packs, lease_term, lease_expires
		FROM %s WHERE version >= %d`+tiny, ident(c.n.watermark()), v))
	if err != nil {
		return false, "", snap, lease, fmt.Errorf("publishing version %d: reading back: %w", v, err)
	}
	var top uint64
	for _, r := range res.Rows {
		top = max(top, asUint(r[0]))
		switch id := asString(r[1]); {
		case asUint(r[0]) != v:
		case id == pid:
			mine = true
			snap = snapshotFromRow([]any{v, id, r[2], r[3], r[4], r[5]})
			lease = Lease{Term: asUint(r[6]), Expires: time.UnixMicro(asInt(r[7])).UTC()}
		default:
			foreign = id
		}
	}
	c.seen(top)
	return mine, foreign, snap, lease, nil
}

// readLease reads, in one query over the lease table, its two newest rows
// (to see a contested head), the highest claimed version (remembered for
// the next attempt) and the server clock.
func (c *Catalog) readLease(ctx context.Context, v uint64) (head []Lease, now time.Time, err error) {
	res, err := c.conn.Query(ctx, fmt.Sprintf(`SELECT x.2, x.3, x.4, x.1, toUInt64(%[2]s), c
		FROM (SELECT arraySlice(arrayReverseSort(groupArray((term, lease_id, holder, expires_at))), 1, 2) AS h, max(version) AS c FROM %[1]s)
		LEFT ARRAY JOIN h AS x`+tiny, ident(c.n.lease()), nowMicros))
	if err != nil {
		return nil, now, fmt.Errorf("publishing version %d: reading the publisher lease: %w", v, err)
	}
	var top uint64
	for _, r := range res.Rows {
		now = time.UnixMicro(asInt(r[4])).UTC()
		top = max(top, asUint(r[5]))
		if asString(r[0]) != "" { // an empty lease table joins as one empty row
			head = append(head, Lease{Term: asUint(r[3]), LeaseID: asString(r[0]), Holder: asString(r[1]), Expires: time.UnixMicro(asInt(r[2])).UTC()})
		}
	}
	sort.Slice(head, func(i, j int) bool {
		if head[i].Term != head[j].Term {
			return head[i].Term > head[j].Term
		}
		return head[i].LeaseID > head[j].LeaseID
	})
	c.seen(top)
	return head, now, nil
}

// Pending counts the inventory rows no published snapshot holds yet, as
// Snapshot.NewPacks counts them: (pack, destination) members, a segment
// one per destination it holds; what a publish now would admit: the rows
// above the latest high-water (one range read of the block numbers).
func (c *Catalog) Pending(ctx context.Context) (uint64, error) {
	q := fmt.Sprintf("WITH %s AS hw SELECT count(DISTINCT store_id, pack_id, destination) FROM %s WHERE _block_number > hw", c.inventoryHW(), ident(c.n.packs())) + tiny
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("counting unpublished packs: %w", err)
	}
	return asUint(res.Rows[0][0]), nil
}

// The admitted set. A publish admits every inventory row that is visible
// to its statement; otherwise the through_lsn it claims (proven by the
// frontier: every pack holding a change at or below it has a committed
// inventory row) could pass a pack it left out. It admits by the
// inventory's block number (_block_number, the persisted number of the
// insert that wrote the row): the engine allocates it under the table's
// parts lock at the moment the insert's part becomes visible, so block
// order is visibility order and a statement's read sees every row up to
// the highest block it sees. The watermark row records that high-water
// (inventory_block), and the high-water is the membership: every
// inventory row at or below it is a member of that snapshot (unless a
// publish at or below it removed it, see PublishReplace), so a publish
// reads only the rows above the previous high-water and lists nothing. No
// clock is involved, so a stalled insert or a server clock stepped back
// delays nothing (TestStalledIndexerPackIsPublished, both cases).
// The high-water relies on the inventory's block numbers never being
// handed out twice: no delete may drop the parts holding its newest
// blocks (the engine would hand those numbers out again after a restart),
// and no merge may replace a row by a later copy (inventoryEngine).
//
// The clock window it replaces (an unexported test knob, clockWindow: the
// negative control) took as the high-water the highest block among rows
// stamped after the last publish minus publishSlack: when every row
// stamped late (a stalled insert, a clock stepped back) fell outside it,
// the publish claimed the frontier without them.
const publishSlack = 30 * time.Second

// inventoryHW is the inventory high-water of the latest published snapshot
// as a scalar over the watermark (the publish statement reads it from its
// watermark scalar instead). 0 when nothing is published.
func (c *Catalog) inventoryHW() string {
	return "ifNull((SELECT inventory_block FROM " + ident(c.n.watermark()) + " ORDER BY version DESC LIMIT 1), 0)"
}

// publishedAt records a successful publish: its server-clock time anchors the
// clock window of the clockWindow knob.
func (c *Catalog) publishedAt(s Snapshot) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	c.lastPubAt = s.PublishedAt.UnixMicro() // follows the server clock, even back
}
