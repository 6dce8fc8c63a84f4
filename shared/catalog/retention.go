package catalog

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Snapshot retention. Expiry is a catalog fact, not a clock a reader
// evaluates: the expiry horizon (p_retention) is a version below which
// every snapshot that is not pinned is expired. Only the live publisher
// advances it (AdvanceRetention, one INSERT ... SELECT under the lease
// fence), only upwards, from catalog.snapshot_retention and
// catalog.snapshot_retain_min; pins (p_snapshot_pins) are append-only
// rows whose newest row per version says pinned or not. Nothing is
// deleted here: an expired snapshot's members stay in the catalog and the
// store until garbage collection, which may remove only what the GC
// horizon (the expiry horizon as it stood catalog.gc_grace ago) lets go.
//
// A read that started on a version before the horizon passed it keeps
// working for gc_grace: a page with a cursor (a continuing read) is
// checked against the GC horizon, a fresh read against the expiry
// horizon. So a read is never refused mid-read sooner than gc_grace after
// its version expired, and GC, bound by the same GC horizon, never
// deletes what such a read still needs.

// ErrExpired is returned (as an *ExpiredError) for a version that is
// published but has expired: older than the expiry horizon and not pinned.
var ErrExpired = errors.New("snapshot expired")

// ExpiredError names the expired version, the oldest retained one (the
// start of the retention window) and the pinned versions older than it.
type ExpiredError struct {
	Version        uint64
	OldestRetained uint64
	PinnedOlder    []uint64 // at most maxNamedPins of them
}

// maxNamedPins bounds the pinned versions an ExpiredError names.
const maxNamedPins = 10

func (e *ExpiredError) Error() string {
	msg := fmt.Sprintf("snapshot %d has expired (older than catalog.snapshot_retention and the newest catalog.snapshot_retain_min snapshots, and not pinned); the oldest retained snapshot is %d",
		e.Version, e.OldestRetained)
	if len(e.PinnedOlder) > 0 {
		vs := make([]string, len(e.PinnedOlder))
		for i, v := range e.PinnedOlder {
			vs[i] = u64(v)
		}
		msg += " (older pinned snapshots: " + strings.Join(vs, ", ") + ")"
	}
	return msg
}

// Is makes errors.Is(err, ErrExpired) true.
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// RetentionPolicy is catalog.snapshot_retention and
// catalog.snapshot_retain_min.
type RetentionPolicy struct {
	Retention time.Duration
	RetainMin int
}

// retentionDDL creates the expiry horizon and the pins.
func retentionDDL(n names) []string {
	return []string{
		// One row per advance of the expiry horizon, written by the live
		// publisher under its fence; the horizon is max(horizon).
		"CREATE TABLE IF NOT EXISTS " + ident(n.retention()) + ` (
			horizon UInt64, advanced_at Int64, lease_id String) ENGINE = MergeTree ORDER BY horizon`,
		// Append-only pin and unpin rows; the newest by (at, pin_id) per
		// version is its state.
		"CREATE TABLE IF NOT EXISTS " + ident(n.pins()) + ` (
			version UInt64, pinned UInt8, reason String, at Int64, pin_id String) ENGINE = MergeTree ORDER BY (version, at, pin_id)`,
	}
}

// horizonSQL is the expiry horizon as a scalar (0: nothing expired).
func (c *Catalog) horizonSQL() string {
	return "(SELECT max(horizon) FROM " + ident(c.n.retention()) + ")"
}

// gcHorizonSQL is the horizon as it stood gc_grace ago, on the server's
// clock: continuing reads and garbage collection are bound by it.
func (c *Catalog) gcHorizonSQL() string {
	return fmt.Sprintf("(SELECT maxIf(horizon, advanced_at <= %s - %d) FROM %s)", nowMicros, c.gcGrace.Microseconds(), ident(c.n.retention()))
}

// pinnedSQL is the set of pinned versions (a subquery).
func (c *Catalog) pinnedSQL() string {
	return "(SELECT version FROM " + ident(c.n.pins()) + " GROUP BY version HAVING argMax(pinned, (at, pin_id)) = 1)"
}

// AdvanceRetention moves the expiry horizon up to the oldest version a
// policy still retains: the newer of the RetainMin-th newest snapshot and
// the oldest published within Retention on the server's clock, never past
// the RetainMin newest. It writes only while l is the live publisher lease
// and only when the horizon rises (one fenced INSERT ... SELECT), then
// returns the horizon.
func (c *Catalog) AdvanceRetention(ctx context.Context, l Lease, p RetentionPolicy) (uint64, error) {
	if p.RetainMin < 1 || p.Retention <= 0 {
		return 0, fmt.Errorf("advancing snapshot retention: retain_min %d and retention %s must be positive", p.RetainMin, p.Retention)
	}
	wt := ident(c.n.watermark())
	// byCount: the oldest of the RetainMin newest (0 while fewer exist);
	// byAge: the oldest published within Retention at or above the current
	// horizon (above every version when none is). Only the watermark rows
	// at or above the current horizon are read.
	q := fmt.Sprintf(`INSERT INTO %[1]s (horizon, advanced_at, lease_id)
		WITH %[2]s AS cur,
			(SELECT if(count() < %[3]d, 0, min(version)) FROM (SELECT version FROM %[4]s WHERE version >= cur ORDER BY version DESC LIMIT %[3]d)) AS byCount,
			(SELECT if(countIf(published_at >= %[5]s - %[6]d) = 0, max(version) + 1, minIf(version, published_at >= %[5]s - %[6]d)) FROM %[4]s WHERE version >= cur) AS byAge
		SELECT least(byCount, byAge) AS h, %[5]s, %[7]s WHERE h > cur AND %[8]s`+tiny,
		ident(c.n.retention()), c.horizonSQL(), p.RetainMin, wt, nowMicros, p.Retention.Microseconds(), quote(l.LeaseID), c.fence(l.LeaseID, "", ""))
	if err := c.conn.Exec(ctx, q); err != nil {
		return 0, fmt.Errorf("advancing snapshot retention: %w", err)
	}
	res, err := c.conn.Query(ctx, "SELECT "+c.horizonSQL())
	if err != nil {
		return 0, fmt.Errorf("reading the expiry horizon: %w", err)
	}
	return asUint(res.Rows[0][0]), nil
}

// Retention is the catalog's retention state.
type Retention struct {
	// Horizon: every version below it that is not pinned is expired.
	Horizon uint64 `json:"horizon"`
	// GCHorizon: the horizon as it stood gc_grace ago.
	GCHorizon uint64 `json:"gc_horizon"`
	// OldestRetained is the oldest published snapshot at or above the
	// horizon, where the retention window starts (0: nothing published).
	OldestRetained uint64 `json:"oldest_retained"`
	// PinnedOlder are pinned snapshots below it (the oldest maxNamedPins).
	PinnedOlder []uint64 `json:"pinned_older,omitempty"`
}

// RetentionState reads the horizons and the oldest retained version.
func (c *Catalog) RetentionState(ctx context.Context) (Retention, error) {
	q := fmt.Sprintf("WITH %s AS h SELECT h, %s, (SELECT minIf(version, version >= h) FROM %s), (SELECT arraySort(groupArray(version)) FROM (SELECT version FROM %s WHERE version < h AND version IN %s ORDER BY version LIMIT %d))",
		c.horizonSQL(), c.gcHorizonSQL(), ident(c.n.watermark()), ident(c.n.watermark()), c.pinnedSQL(), maxNamedPins)
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return Retention{}, fmt.Errorf("reading snapshot retention: %w", err)
	}
	r := res.Rows[0]
	st := Retention{Horizon: asUint(r[0]), GCHorizon: asUint(r[1]), OldestRetained: asUint(r[2])}
	if vs, _ := r[3].([]any); len(vs) > 0 {
		for _, v := range vs {
			st.PinnedOlder = append(st.PinnedOlder, asUint(v))
		}
	}
	return st, nil
}

// checkRetained resolves an explicit version for a read: published, and
// retained (at or above the expiry horizon, or pinned) or, for a
// continuing read, at or above the GC horizon. One statement.
func (c *Catalog) checkRetained(ctx context.Context, version uint64, continuing bool) error {
	q := fmt.Sprintf("SELECT (SELECT count() FROM %s WHERE version = %d), %s, %s, (SELECT argMax(pinned, (at, pin_id)) FROM %s WHERE version = %d)"+tiny,
		ident(c.n.watermark()), version, c.horizonSQL(), c.gcHorizonSQL(), ident(c.n.pins()), version)
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("reading snapshot %d: %w", version, err)
	}
	r := res.Rows[0]
	if asUint(r[0]) == 0 {
		// Garbage collection deletes expired watermark rows (gc.go): a
		// version below the expiry horizon without one is expired, not
		// unknown.
		if version < asUint(r[1]) && version > c.floorVersion(ctx) {
			return c.expired(ctx, version)
		}
		return c.missingVersion(ctx, version)
	}
	bound := asUint(r[1])
	if continuing {
		bound = asUint(r[2])
	}
	if version >= bound || asUint(r[3]) == 1 {
		return nil
	}
	return c.expired(ctx, version)
}

func (c *Catalog) expired(ctx context.Context, version uint64) error {
	st, err := c.RetentionState(ctx)
	if err != nil {
		return err
	}
	return &ExpiredError{Version: version, OldestRetained: st.OldestRetained, PinnedOlder: st.PinnedOlder}
}

// Pin is a snapshot's pin.
type Pin struct {
	Version  uint64    `json:"version"`
	Reason   string    `json:"reason,omitempty"`
	PinnedAt time.Time `json:"pinned_at"`
}

// PinSnapshot pins a published, retained version so it never expires
// (pinning a pinned version again replaces its reason). The pin is one
// INSERT ... SELECT written only while the version is published and
// retained: an expired version answers ErrExpired, one never published
// ErrNoSnapshot. A horizon that passes the version after the pin landed
// leaves it retained (pinned), so the race between the two statements is
// harmless.
func (c *Catalog) PinSnapshot(ctx context.Context, version uint64, reason string) (Pin, error) {
	q := fmt.Sprintf(`INSERT INTO %[1]s (version, pinned, reason, at, pin_id)
		SELECT %[2]d, 1, %[3]s, %[4]s, %[5]s
		WHERE (SELECT count() FROM %[6]s WHERE version = %[2]d) > 0
			AND (%[2]d >= %[7]s OR (SELECT argMax(pinned, (at, pin_id)) FROM %[1]s WHERE version = %[2]d) = 1)`,
		ident(c.n.pins()), version, quote(reason), nowMicros, quote(uuid.NewString()), ident(c.n.watermark()), c.horizonSQL())
	if err := c.conn.Exec(ctx, q); err != nil {
		return Pin{}, fmt.Errorf("pinning snapshot %d: %w", version, err)
	}
	pins, err := c.Pins(ctx)
	if err != nil {
		return Pin{}, err
	}
	if p, ok := pins[version]; ok && p.Reason == reason {
		return p, nil
	}
	if err := c.checkRetained(ctx, version, false); err != nil {
		return Pin{}, fmt.Errorf("pinning snapshot %d: %w", version, err)
	}
	return Pin{}, fmt.Errorf("pinning snapshot %d: the pin did not land (a concurrent pin or unpin of the version)", version)
}

// UnpinSnapshot removes version's pin (nothing to do when it has none);
// below the expiry horizon it expires at once. A version never published
// answers ErrNoSnapshot.
func (c *Catalog) UnpinSnapshot(ctx context.Context, version uint64) error {
	pins, err := c.Pins(ctx)
	if err != nil {
		return err
	}
	if _, ok := pins[version]; !ok {
		if _, err := c.Snapshot(ctx, version); err != nil {
			return fmt.Errorf("unpinning snapshot %d: %w", version, err)
		}
		return nil
	}
	q := fmt.Sprintf("INSERT INTO %s (version, pinned, reason, at, pin_id) VALUES (%d, 0, '', %s, %s)",
		ident(c.n.pins()), version, nowMicros, quote(uuid.NewString()))
	if err := c.conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("unpinning snapshot %d: %w", version, err)
	}
	return nil
}

// Pins returns every pinned version.
func (c *Catalog) Pins(ctx context.Context) (map[uint64]Pin, error) {
	res, err := c.conn.Query(ctx, "SELECT version, argMax((pinned, reason, at), (at, pin_id)) AS s FROM "+ident(c.n.pins())+" GROUP BY version HAVING s.1 = 1 ORDER BY version"+tiny)
	if err != nil {
		return nil, fmt.Errorf("reading snapshot pins: %w", err)
	}
	out := map[uint64]Pin{}
	for _, r := range res.Rows {
		t, _ := r[1].([]any)
		if len(t) != 3 {
			return nil, fmt.Errorf("reading snapshot pins: unexpected row %v", r)
		}
		v := asUint(r[0])
		out[v] = Pin{Version: v, Reason: asString(t[1]), PinnedAt: time.UnixMicro(asInt(t[2])).UTC()}
	}
	return out, nil
}

// SnapshotPage asks for retained snapshots.
type SnapshotPage struct {
	Before uint64 // only versions below it; 0: from the newest
	Limit  int    // at most this many (default and cap 10000)
}

// maxSnapshotPage bounds one page of snapshots.
const maxSnapshotPage = 10000

// RetainedSnapshots returns one page of the retained snapshots (at or
// above the expiry horizon, or pinned): the newest Limit below Before,
// oldest first, each marked with its pin, and the Before of the next page
// (0 on the last). It reads the pins and then only the page's watermark
// rows: a sort-key range plus the pinned versions.
func (c *Catalog) RetainedSnapshots(ctx context.Context, q SnapshotPage) ([]Snapshot, uint64, error) {
	if q.Limit <= 0 || q.Limit > maxSnapshotPage {
		q.Limit = maxSnapshotPage
	}
	pins, err := c.Pins(ctx)
	if err != nil {
		return nil, 0, err
	}
	keep := "version >= " + c.horizonSQL()
	if len(pins) > 0 {
		vs := make([]string, 0, len(pins))
		for v := range pins {
			vs = append(vs, u64(v))
		}
		sort.Strings(vs)
		keep = "(" + keep + " OR version IN (" + strings.Join(vs, ", ") + "))"
	}
	if q.Before > 0 {
		keep += " AND version < " + u64(q.Before)
	}
	res, err := c.conn.Query(ctx, fmt.Sprintf("SELECT version, publish_id, published_at, through_lsn, new_packs, packs FROM %s WHERE %s ORDER BY version DESC LIMIT %d"+tiny,
		ident(c.n.watermark()), keep, q.Limit+1))
	if err != nil {
		return nil, 0, fmt.Errorf("listing snapshots: %w", err)
	}
	var next uint64
	rows := res.Rows
	if len(rows) > q.Limit {
		rows = rows[:q.Limit]
		next = asUint(rows[len(rows)-1][0])
	}
	out := make([]Snapshot, 0, len(rows))
	for i := len(rows) - 1; i >= 0; i-- {
		s := snapshotFromRow(rows[i])
		if p, ok := pins[s.Version]; ok {
			s.Pinned, s.PinReason = true, p.Reason
		}
		out = append(out, s)
	}
	return out, next, nil
}
