package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the spans of this package (lease acquisition, and the
// cursor writes of TracedCursors).
const TracerName = "github.com/sluice-cdc/sluice/shared/state"

var tracer = otel.Tracer(TracerName)

// Lease is a held lease as the server recorded it. Expires is by the
// server's clock: use it for display, and renew on a local timer well inside
// the TTL (e.g. every TTL/3); never compare it with the local clock to decide
// whether the lease is still held.
type Lease struct {
	Name    string
	Holder  string
	Term    int64
	Expires time.Time
}

// LeaseKey is one holding of a lease: the lease stays held while its row
// keeps this holder and term and has not expired.
type LeaseKey struct {
	Name   string
	Holder string
	Term   int64
}

// Key is l's holding.
func (l Lease) Key() LeaseKey { return LeaseKey{Name: l.Name, Holder: l.Holder, Term: l.Term} }

// Leases acquires, renews, releases and lists leases, and says whether
// holdings are still live.
type Leases struct {
	pool                                     *pgxpool.Pool
	qAcquire, qRenew, qRelease, qList, qLive string
	qHeld, qHeldMany, qReleaseInstance       string
}

// NewLeases returns the leases of the state schema (DefaultSchema when
// empty). Migrate must have run.
func NewLeases(pool *pgxpool.Pool, schema string) *Leases {
	if schema == "" {
		schema = DefaultSchema
	}
	t := pgx.Identifier{schema, "leases"}.Sanitize()
	return &Leases{
		pool: pool,
		// One statement: insert (term 1), or take over an expired lease or
		// re-acquire our own, always with term+1.
		qAcquire: `INSERT INTO ` + t + ` AS l (name, holder, term, acquired_at, renewed_at, expires_at)
			VALUES ($1, $2, 1, now(), now(), now() + $3::bigint * interval '1 microsecond')
			ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, term = l.term + 1,
				acquired_at = now(), renewed_at = now(), expires_at = EXCLUDED.expires_at
			WHERE l.expires_at <= now() OR l.holder = EXCLUDED.holder
			RETURNING name, holder, term, expires_at`,
		qRenew: `UPDATE ` + t + ` SET renewed_at = now(), expires_at = now() + $4::bigint * interval '1 microsecond'
			WHERE name = $1 AND holder = $2 AND term = $3 AND expires_at > now()
			RETURNING name, holder, term, expires_at`,
		qRelease: `UPDATE ` + t + ` SET expires_at = now()
			WHERE name = $1 AND holder = $2 AND term = $3 AND expires_at > now()`,
		qList: `SELECT name, holder, term, expires_at FROM ` + t + `
			WHERE starts_with(name, $1) ORDER BY name`,
		qLive: `SELECT name, holder, term, expires_at FROM ` + t + `
			WHERE starts_with(name, $1) AND expires_at > now() ORDER BY name`,
		qHeld: `SELECT EXISTS (SELECT 1 FROM ` + t + `
			WHERE name = $1 AND holder = $2 AND term = $3 AND expires_at > now())`,
		qReleaseInstance: `UPDATE ` + t + ` SET expires_at = now()
			WHERE (holder = $1 OR starts_with(holder, $1 || '/')) AND expires_at > now()
			RETURNING name`,
		qHeldMany: `SELECT l.name, l.holder, l.term FROM ` + t + ` l
			JOIN unnest($1::text[], $2::text[], $3::bigint[]) AS k(name, holder, term)
			  ON l.name = k.name AND l.holder = k.holder AND l.term = k.term
			WHERE l.expires_at > now()`,
	}
}

func checkTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: lease TTL %s is below 1ms", ErrBadArgument, ttl)
	}
	return nil
}

// Acquire takes lease name for holder for ttl: it creates the lease (term 1),
// takes it over when it has expired by the server clock, or re-acquires it
// when holder already holds it; each success increments the term. It
// returns (zero, false, nil) while another holder's lease is live.
func (ls *Leases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, bool, error) {
	ctx, span := tracer.Start(ctx, "state.lease.acquire", trace.WithAttributes(attribute.String("sluice.lease", name)))
	defer span.End()
	if name == "" || holder == "" {
		return Lease{}, false, fmt.Errorf("acquiring lease: %w: empty name or holder", ErrBadArgument)
	}
	if err := checkTTL(ttl); err != nil {
		return Lease{}, false, fmt.Errorf("acquiring lease %s: %w", name, err)
	}
	var l Lease
	err := ls.pool.QueryRow(ctx, ls.qAcquire, name, holder, ttl.Microseconds()).Scan(&l.Name, &l.Holder, &l.Term, &l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, false, nil
	}
	if err != nil {
		span.RecordError(err)
		return Lease{}, false, fmt.Errorf("acquiring lease %s: %w", name, err)
	}
	span.SetAttributes(attribute.Int64("sluice.lease.term", l.Term))
	return l, true, nil
}

// Renew extends l by ttl from now (server clock). It returns ErrLeaseLost
// when l has expired or was taken over; the caller must stop acting as owner.
func (ls *Leases) Renew(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	if err := checkTTL(ttl); err != nil {
		return Lease{}, fmt.Errorf("renewing lease %s: %w", l.Name, err)
	}
	var n Lease
	err := ls.pool.QueryRow(ctx, ls.qRenew, l.Name, l.Holder, l.Term, ttl.Microseconds()).Scan(&n.Name, &n.Holder, &n.Term, &n.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, fmt.Errorf("renewing lease %s term %d of %s: %w", l.Name, l.Term, l.Holder, ErrLeaseLost)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("renewing lease %s: %w", l.Name, err)
	}
	return n, nil
}

// Release expires l now, so another holder can acquire it at once. Releasing
// a lease that is already lost is not an error.
func (ls *Leases) Release(ctx context.Context, l Lease) error {
	if _, err := ls.pool.Exec(ctx, ls.qRelease, l.Name, l.Holder, l.Term); err != nil {
		return fmt.Errorf("releasing lease %s: %w", l.Name, err)
	}
	return nil
}

// ReleaseInstance expires now every live lease held by the process
// instance named instance: held by instance itself or by one of its
// services (instance + "/" + service, stack.Stack.HolderID). Only a caller
// that has proven that process dead may call it (`sluice dev` holds its
// data_dir's lock, which the kernel released when its predecessor died):
// a live holder would go on acting on leases another then takes. It
// returns the names of the leases it expired.
func (ls *Leases) ReleaseInstance(ctx context.Context, instance string) ([]string, error) {
	if instance == "" || strings.Contains(instance, "/") {
		return nil, fmt.Errorf("releasing the leases of an instance: %w: instance %q is empty or holds a '/'", ErrBadArgument, instance)
	}
	rows, err := ls.pool.Query(ctx, ls.qReleaseInstance, instance)
	if err != nil {
		return nil, fmt.Errorf("releasing the leases of instance %s: %w", instance, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("releasing the leases of instance %s: %w", instance, err)
	}
	return names, nil
}

// List returns every lease whose name starts with prefix, live or expired,
// ordered by name.
func (ls *Leases) List(ctx context.Context, prefix string) ([]Lease, error) {
	return ls.list(ctx, ls.qList, prefix)
}

// ListLive returns the leases whose name starts with prefix that are live
// by the server clock, ordered by name (e.g. the flusher members alive now).
func (ls *Leases) ListLive(ctx context.Context, prefix string) ([]Lease, error) {
	return ls.list(ctx, ls.qLive, prefix)
}

func (ls *Leases) list(ctx context.Context, q, prefix string) ([]Lease, error) {
	rows, err := ls.pool.Query(ctx, q, prefix)
	if err != nil {
		return nil, fmt.Errorf("listing leases %q: %w", prefix, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Lease, error) {
		var l Lease
		err := r.Scan(&l.Name, &l.Holder, &l.Term, &l.Expires)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing leases %q: %w", prefix, err)
	}
	return out, nil
}

// Held reports whether l (its holder and term) is still live by the server
// clock, without extending it: the check right before acting as owner.
func (ls *Leases) Held(ctx context.Context, l Lease) (bool, error) {
	var live bool
	if err := ls.pool.QueryRow(ctx, ls.qHeld, l.Name, l.Holder, l.Term).Scan(&live); err != nil {
		return false, fmt.Errorf("checking lease %s term %d of %s: %w", l.Name, l.Term, l.Holder, err)
	}
	return live, nil
}

// HeldMany is Held for many leases in one statement: the set of those
// still live by the server clock.
func (ls *Leases) HeldMany(ctx context.Context, leases []Lease) (map[LeaseKey]bool, error) {
	live := map[LeaseKey]bool{}
	if len(leases) == 0 {
		return live, nil
	}
	names, holders, terms := make([]string, 0, len(leases)), make([]string, 0, len(leases)), make([]int64, 0, len(leases))
	seen := make(map[LeaseKey]bool, len(leases))
	for _, l := range leases {
		if k := l.Key(); !seen[k] {
			seen[k] = true
			names, holders, terms = append(names, l.Name), append(holders, l.Holder), append(terms, l.Term)
		}
	}
	rows, err := ls.pool.Query(ctx, ls.qHeldMany, names, holders, terms)
	if err != nil {
		return nil, fmt.Errorf("checking %d leases: %w", len(names), err)
	}
	var k LeaseKey
	if _, err := pgx.ForEachRow(rows, []any{&k.Name, &k.Holder, &k.Term}, func() error {
		live[k] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("checking %d leases: %w", len(names), err)
	}
	return live, nil
}

// Now is the state database's clock, the one lease expiry is judged by:
// liveness is never judged by the local clock.
func (ls *Leases) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := ls.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return now, fmt.Errorf("reading the state database clock: %w", err)
	}
	return now, nil
}
