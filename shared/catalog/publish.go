package catalog

import (
	"context"
	"fmt"
	"math/rand/v2"
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

// fence is the predicate, on the server's clock, that leaseID is the live
// head of the lease table. It reads the head row once (one subquery), so a
// takeover cannot pair the old holder's id with the new holder's expiry.
// When barrier is not "", the same subquery also requires every published
// version to be below it.
func (c *Catalog) fence(leaseID string, barrier string) string {
	if c.noFence {
		return "1"
	}
	cond := "lease_id = " + quote(leaseID) + " AND expires_at > " + nowMicros
	if barrier != "" {
		cond += " AND (SELECT ifNull(max(version), 0) FROM " + ident(c.n.watermark()) + ") < " + barrier
	}
	return fmt.Sprintf("(SELECT count() FROM (SELECT lease_id, expires_at FROM %s ORDER BY term DESC, lease_id DESC LIMIT 1) WHERE %s) = 1",
		ident(c.n.lease()), cond)
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
	lt := ident(c.n.lease())
	q := fmt.Sprintf(`INSERT INTO %s (term, lease_id, holder, acquired_at, expires_at)
		SELECT (SELECT max(term) FROM %s) + 1, %s, %s, %s, %s + %d WHERE %s`,
		lt, lt, quote(l.LeaseID), quote(l.Holder), nowMicros, nowMicros, ttl.Microseconds(), c.fence(l.LeaseID, ""))
	if err := c.conn.Exec(ctx, q); err != nil {
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
		lt, lt, quote(uuid.NewString()), nowMicros, c.fence(l.LeaseID, ""))
	if err := c.conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("releasing publisher lease: %w", err)
	}
	return nil
}

// allocate claims the next catalog version by append-and-read-back; the
// version is the caller's only if its claim is alone at it.
func (c *Catalog) allocate(ctx context.Context) (uint64, error) {
	ct, wt := ident(c.n.claims()), ident(c.n.watermark())
	for attempt := 0; attempt < 8; attempt++ {
		id := uuid.NewString()
		q := fmt.Sprintf(`INSERT INTO %s (version, claim_id, claimed_at)
			SELECT greatest((SELECT ifNull(max(version), 0) FROM %s), (SELECT ifNull(max(version), 0) FROM %s)) + %d, %s, %s`,
			ct, ct, wt, 1+rand.IntN(8*attempt+1), quote(id), nowMicros)
		if err := c.conn.Exec(ctx, q); err != nil {
			return 0, fmt.Errorf("claiming a catalog version: %w", err)
		}
		res, err := c.conn.Query(ctx, fmt.Sprintf("SELECT version, claim_id FROM %s WHERE version = (SELECT version FROM %s WHERE claim_id = %s LIMIT 1)", ct, ct, quote(id)))
		if err != nil {
			return 0, fmt.Errorf("reading back version claim: %w", err)
		}
		if len(res.Rows) == 1 && asString(res.Rows[0][1]) == id {
			return asUint(res.Rows[0][0]), nil
		}
	}
	return 0, fmt.Errorf("%w: every version tried was contested", ErrVersionRace)
}

// PublishResult describes a successful publish.
type PublishResult struct {
	Snapshot Snapshot
	Attempts int
	Lease    Lease // the renewed lease
}

// Publish publishes the next snapshot: every indexed pack not yet a member,
// and through_lsn (never below the previous snapshot's). Each attempt
// renews the lease, allocates a version, writes the manifest rows and then
// the watermark row with a fresh publish_id — each statement an INSERT ...
// SELECT carrying the lease fence and the version barrier in one subquery —
// and reads the publish_id back. A lost version is retried higher; a lost
// lease returns ErrLeaseLost (stop publishing, acquire again); a version
// published twice returns ErrPublishConflict.
func (c *Catalog) Publish(ctx context.Context, l Lease, ttl time.Duration, through proto.LSN) (PublishResult, error) {
	mt, wt, pt := ident(c.n.manifest()), ident(c.n.watermark()), ident(c.n.packs())
	for attempt := 1; attempt <= 8; attempt++ {
		var err error
		l, err = c.RenewLease(ctx, l, ttl)
		if err != nil {
			return PublishResult{Lease: l}, err
		}
		v, err := c.allocate(ctx)
		if err != nil {
			return PublishResult{Lease: l}, err
		}
		if c.beforeStatements != nil {
			c.beforeStatements()
		}
		pid := uuid.NewString()
		fence := c.fence(l.LeaseID, u64(v))
		q := fmt.Sprintf(`INSERT INTO %s (version, publish_id, store_id, pack_id, destination, table)
			SELECT %d, %s, store_id, pack_id, any(destination), any(table) FROM %s
			WHERE (store_id, pack_id) NOT IN (SELECT store_id, pack_id FROM %s WHERE (version, publish_id) IN (SELECT version, publish_id FROM %s))
			AND %s
			GROUP BY store_id, pack_id`,
			mt, v, quote(pid), pt, mt, wt, fence)
		if err := c.conn.Exec(ctx, q); err != nil {
			return PublishResult{Lease: l}, fmt.Errorf("publishing version %d: writing manifest: %w", v, err)
		}
		q = fmt.Sprintf(`INSERT INTO %s (version, publish_id, published_at, through_lsn, new_packs, lease_id, holder)
			SELECT %d, %s, %s, greatest(toUInt64(%d), (SELECT ifNull(max(through_lsn), 0) FROM %s)),
			(SELECT count() FROM %s WHERE version = %d AND publish_id = %s), %s, %s
			WHERE %s`,
			wt, v, quote(pid), nowMicros, uint64(through), wt, mt, v, quote(pid), quote(l.LeaseID), quote(l.Holder), fence)
		if err := c.conn.Exec(ctx, q); err != nil {
			return PublishResult{Lease: l}, fmt.Errorf("publishing version %d: writing watermark: %w", v, err)
		}
		res, err := c.conn.Query(ctx, fmt.Sprintf(
			"SELECT publish_id, published_at, through_lsn, new_packs, (SELECT sum(new_packs) FROM %s WHERE version <= %d) FROM %s WHERE version = %d",
			wt, v, wt, v))
		if err != nil {
			return PublishResult{Lease: l}, fmt.Errorf("publishing version %d: reading back: %w", v, err)
		}
		mine, foreign := false, ""
		var snap Snapshot
		for _, r := range res.Rows {
			if id := asString(r[0]); id == pid {
				mine = true
				snap = snapshotFromRow([]any{v, id, r[1], r[2], r[3], r[4]})
			} else {
				foreign = id
			}
		}
		switch {
		case mine && foreign == "":
			return PublishResult{Snapshot: snap, Attempts: attempt, Lease: l}, nil
		case mine:
			return PublishResult{Lease: l}, fmt.Errorf("%w: version %d holds publish %s beside this publish %s", ErrPublishConflict, v, foreign, pid)
		}
		// Nothing of ours is visible. A lost lease stops us; a lost version
		// is retried above it.
		head, now, err := c.readHead(ctx, 0, 2)
		if err != nil {
			return PublishResult{Lease: l}, err
		}
		if len(head) == 0 || head[0].LeaseID != l.LeaseID || !head[0].Expires.After(now) || (len(head) == 2 && head[1].Term == head[0].Term) {
			return PublishResult{Lease: l}, c.lost(l, head)
		}
		c.log.Debug("publish lost its version, retrying higher", "version", v)
	}
	return PublishResult{Lease: l}, fmt.Errorf("%w: gave up after 8 attempts", ErrVersionRace)
}

// Pending counts indexed packs that no published snapshot holds yet.
func (c *Catalog) Pending(ctx context.Context) (uint64, error) {
	q := fmt.Sprintf("SELECT count(DISTINCT store_id, pack_id) FROM %s WHERE (store_id, pack_id) NOT IN (SELECT store_id, pack_id FROM %s WHERE (version, publish_id) IN (SELECT version, publish_id FROM %s))",
		ident(c.n.packs()), ident(c.n.manifest()), ident(c.n.watermark()))
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("counting unpublished packs: %w", err)
	}
	return asUint(res.Rows[0][0]), nil
}
