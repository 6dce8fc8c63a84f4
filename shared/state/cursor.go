package state

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/proto"
)

// Cursor is one destination's persisted cursor: every change of the
// destination at or before Position is durably in packs.
type Cursor struct {
	Destination string
	Partition   int
	Position    proto.Position
	Term        int64 // term of the lease that wrote it
	UpdatedAt   time.Time
}

// Cursors reads and advances destination cursors.
type Cursors struct {
	pool                     *pgxpool.Pool
	schema                   string
	qAdvance, qFence, qLoad  string
	qLoadSome                string
	qGet, qAll               string
	qAdvanceMany, qFenceMany string
	// Negative-control knobs, only ever set by this package's tests (through
	// withoutSafety, or directly): the fence, the monotonic guard, or the
	// fence's FOR SHARE lock switched off.
	noFence, noMonotonic, noShareLock bool
}

// NewCursors returns the cursors of the state schema (DefaultSchema when
// empty). Migrate must have run.
func NewCursors(pool *pgxpool.Pool, schema string) *Cursors {
	if schema == "" {
		schema = DefaultSchema
	}
	c := &Cursors{pool: pool, schema: schema}
	c.build()
	return c
}

// withoutSafety returns a copy of c with the fence and/or the monotonic guard
// switched off: the negative controls of this package's tests.
func (c *Cursors) withoutSafety(noFence, noMonotonic bool) *Cursors {
	n := &Cursors{pool: c.pool, schema: c.schema, noFence: noFence, noMonotonic: noMonotonic}
	n.build()
	return n
}

func (c *Cursors) build() {
	schema := c.schema
	lt := pgx.Identifier{schema, "leases"}.Sanitize()
	ct := pgx.Identifier{schema, "cursors"}.Sanitize()
	// The fence: the caller's lease row, live by the server clock, locked
	// FOR SHARE until the statement's transaction ends, so a takeover (which
	// updates that row) waits for this write, and a write that waited behind
	// a takeover re-checks the row and finds the new term.
	fence := `SELECT 1 FROM ` + lt + ` WHERE name = $1 AND holder = $2 AND term = $3 AND expires_at > now() FOR SHARE`
	if c.noShareLock {
		fence = strings.TrimSuffix(fence, " FOR SHARE")
	}
	if c.noFence {
		fence = `SELECT 1 WHERE $1::text IS NOT NULL AND $2::text IS NOT NULL AND $3::bigint IS NOT NULL`
	}
	// The monotonic guard: a stale write never moves a cursor back.
	guard := ` WHERE (c.lsn, c.seq) <= (EXCLUDED.lsn, EXCLUDED.seq)`
	if c.noMonotonic {
		guard = ``
	}
	c.qAdvance = `WITH fence AS (` + fence + `)
		INSERT INTO ` + ct + ` AS c (destination, partition, lsn, seq, term, updated_at)
		SELECT $4, $5, $6, $7, $3, now() FROM fence
		ON CONFLICT (destination) DO UPDATE SET partition = EXCLUDED.partition,
			lsn = EXCLUDED.lsn, seq = EXCLUDED.seq, term = EXCLUDED.term, updated_at = EXCLUDED.updated_at` + guard + `
		RETURNING true`
	// AdvanceMany: the same fence (every distinct lease of the batch, live,
	// locked FOR SHARE) and guard, for a batch of rows in one statement. A
	// row whose lease fails the fence is not written; the others are.
	manyFence := `SELECT l.name, l.holder, l.term FROM ` + lt + ` l
			JOIN (SELECT DISTINCT lname, holder, term FROM input) k
			  ON l.name = k.lname AND l.holder = k.holder AND l.term = k.term
			WHERE l.expires_at > now() FOR SHARE OF l`
	if c.noShareLock {
		manyFence = strings.TrimSuffix(manyFence, " FOR SHARE OF l")
	}
	if c.noFence {
		manyFence = `SELECT DISTINCT lname AS name, holder, term FROM input`
	}
	c.qAdvanceMany = `WITH input AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::int[], $6::bigint[], $7::bigint[])
				AS i(lname, holder, term, destination, partition, lsn, seq)),
		fence AS (` + manyFence + `)
		INSERT INTO ` + ct + ` AS c (destination, partition, lsn, seq, term, updated_at)
		SELECT i.destination, i.partition, i.lsn, i.seq, i.term, now()
			FROM input i JOIN fence f ON f.name = i.lname AND f.holder = i.holder AND f.term = i.term
		ON CONFLICT (destination) DO UPDATE SET partition = EXCLUDED.partition,
			lsn = EXCLUDED.lsn, seq = EXCLUDED.seq, term = EXCLUDED.term, updated_at = EXCLUDED.updated_at` + guard + `
		RETURNING c.destination`
	c.qFenceMany = `SELECT k.lname, k.holder, k.term FROM unnest($1::text[], $2::text[], $3::bigint[]) AS k(lname, holder, term)
		WHERE EXISTS (SELECT 1 FROM ` + lt + ` l WHERE l.name = k.lname AND l.holder = k.holder AND l.term = k.term AND l.expires_at > now())`
	c.qFence = `SELECT EXISTS (SELECT 1 FROM ` + lt + ` WHERE name = $1 AND holder = $2 AND term = $3 AND expires_at > now())`
	c.qLoad = `SELECT destination, lsn, seq FROM ` + ct + ` WHERE partition = $1`
	c.qLoadSome = `SELECT destination, lsn, seq FROM ` + ct + ` WHERE partition = $1 AND destination = ANY($2::text[])`
	c.qGet = `SELECT lsn, seq FROM ` + ct + ` WHERE destination = $1`
	c.qAll = `SELECT destination, partition, lsn, seq, term, updated_at FROM ` + ct + ` ORDER BY destination`
}

// Advance moves destination's cursor to pos, in one statement fenced by
// lease l and guarded to be monotonic. It returns:
//   - (true, nil) when the cursor is now at pos;
//   - (false, nil) when the cursor is already past pos (a stale write; the
//     cursor did not move);
//   - ErrLeaseLost when l is not live (expired by the server clock, or taken
//     over): nothing was written, and the caller must stop flushing the
//     partition.
func (c *Cursors) Advance(ctx context.Context, l Lease, destination string, partition int, pos proto.Position) (bool, error) {
	if err := proto.ValidateDestination(destination); err != nil {
		return false, fmt.Errorf("advancing cursor: %w: %v", ErrBadArgument, err)
	}
	if partition < 0 || l.Name == "" {
		return false, fmt.Errorf("advancing cursor %s: %w: partition %d, lease %q", destination, ErrBadArgument, partition, l.Name)
	}
	if uint64(pos.LSN) > math.MaxInt64 || pos.Seq > math.MaxInt64 {
		return false, fmt.Errorf("advancing cursor %s to %s: %w", destination, pos, ErrPositionRange)
	}
	return c.advance(ctx, c.pool, l, destination, partition, pos)
}

// querier is what advance needs: a pool, or a transaction in tests that hold
// an Advance open to race a takeover against it.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (c *Cursors) advance(ctx context.Context, q querier, l Lease, destination string, partition int, pos proto.Position) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, c.qAdvance, l.Name, l.Holder, l.Term,
		destination, partition, int64(pos.LSN), int64(pos.Seq)).Scan(&ok)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("advancing cursor %s to %s: %w", destination, pos, err)
	}
	// No row: either the fence failed or the guard refused a stale write.
	var live bool
	if err := q.QueryRow(ctx, c.qFence, l.Name, l.Holder, l.Term).Scan(&live); err != nil {
		return false, fmt.Errorf("checking lease %s after a refused cursor write: %w", l.Name, err)
	}
	if !live && !c.noFence {
		return false, fmt.Errorf("advancing cursor %s to %s under lease %s term %d: %w", destination, pos, l.Name, l.Term, ErrLeaseLost)
	}
	return false, nil
}

// CursorAdvance is one row of AdvanceMany: move Destination's cursor (of
// Partition) to Position under Lease.
type CursorAdvance struct {
	Lease       Lease
	Destination string
	Partition   int
	Position    proto.Position
}

// AdvanceResult is the outcome of one CursorAdvance, as Advance would
// return it: Advanced when the cursor is now at the position; neither
// Advanced nor Err for a stale write (the cursor is already past it); Err
// wrapping ErrLeaseLost when the row's lease failed the fence (nothing was
// written for that row).
type AdvanceResult struct {
	Advanced bool
	Err      error
}

// AdvanceMany is Advance for a batch of destinations (under one or more
// leases) in one statement: every row is fenced by its own lease, checked
// live by the server clock and locked FOR SHARE for the statement, and
// guarded to be monotonic, exactly as Advance. Rows whose lease fails the
// fence are not written and report ErrLeaseLost; the other rows are written.
// A destination may appear only once per batch. The returned error is for
// the batch as a whole (bad arguments, the database): then nothing was
// written.
func (c *Cursors) AdvanceMany(ctx context.Context, advs []CursorAdvance) ([]AdvanceResult, error) {
	seen := make(map[string]bool, len(advs))
	for _, a := range advs {
		if err := proto.ValidateDestination(a.Destination); err != nil {
			return nil, fmt.Errorf("advancing cursors: %w: %v", ErrBadArgument, err)
		}
		if a.Partition < 0 || a.Lease.Name == "" {
			return nil, fmt.Errorf("advancing cursor %s: %w: partition %d, lease %q", a.Destination, ErrBadArgument, a.Partition, a.Lease.Name)
		}
		if uint64(a.Position.LSN) > math.MaxInt64 || a.Position.Seq > math.MaxInt64 {
			return nil, fmt.Errorf("advancing cursor %s to %s: %w", a.Destination, a.Position, ErrPositionRange)
		}
		if seen[a.Destination] {
			return nil, fmt.Errorf("advancing cursors: %w: destination %s appears twice", ErrBadArgument, a.Destination)
		}
		seen[a.Destination] = true
	}
	if len(advs) == 0 {
		return nil, nil
	}
	return c.advanceMany(ctx, c.pool, advs)
}

// multiQuerier is what advanceMany needs: a pool, or a transaction in tests.
type multiQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (c *Cursors) advanceMany(ctx context.Context, q multiQuerier, advs []CursorAdvance) ([]AdvanceResult, error) {
	n := len(advs)
	lnames, holders, dests := make([]string, n), make([]string, n), make([]string, n)
	terms, lsns, seqs := make([]int64, n), make([]int64, n), make([]int64, n)
	parts := make([]int32, n)
	for i, a := range advs {
		lnames[i], holders[i], terms[i] = a.Lease.Name, a.Lease.Holder, a.Lease.Term
		dests[i], parts[i] = a.Destination, int32(a.Partition)
		lsns[i], seqs[i] = int64(a.Position.LSN), int64(a.Position.Seq)
	}
	rows, err := q.Query(ctx, c.qAdvanceMany, lnames, holders, terms, dests, parts, lsns, seqs)
	if err != nil {
		return nil, fmt.Errorf("advancing %d cursors: %w", n, err)
	}
	written, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("advancing %d cursors: %w", n, err)
	}
	out := make([]AdvanceResult, n)
	done := make(map[string]bool, len(written))
	for _, d := range written {
		done[d] = true
	}
	type key struct {
		name, holder string
		term         int64
	}
	var check []key
	seen := map[key]bool{}
	for i, a := range advs {
		if done[a.Destination] {
			out[i].Advanced = true
			continue
		}
		k := key{a.Lease.Name, a.Lease.Holder, a.Lease.Term}
		if !seen[k] {
			seen[k] = true
			check = append(check, k)
		}
	}
	if len(check) == 0 {
		return out, nil
	}
	// Rows not written: the fence failed or the guard refused a stale write.
	kn, kh, kt := make([]string, len(check)), make([]string, len(check)), make([]int64, len(check))
	for i, k := range check {
		kn[i], kh[i], kt[i] = k.name, k.holder, k.term
	}
	lrows, err := q.Query(ctx, c.qFenceMany, kn, kh, kt)
	if err != nil {
		return nil, fmt.Errorf("checking leases after refused cursor writes: %w", err)
	}
	live := map[key]bool{}
	var ln, lh string
	var lt int64
	_, err = pgx.ForEachRow(lrows, []any{&ln, &lh, &lt}, func() error {
		live[key{ln, lh, lt}] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checking leases after refused cursor writes: %w", err)
	}
	for i, a := range advs {
		if out[i].Advanced {
			continue
		}
		if !live[key{a.Lease.Name, a.Lease.Holder, a.Lease.Term}] && !c.noFence {
			out[i].Err = fmt.Errorf("advancing cursor %s to %s under lease %s term %d: %w", a.Destination, a.Position, a.Lease.Name, a.Lease.Term, ErrLeaseLost)
		}
	}
	return out, nil
}

// Get returns destination's cursor, and false when it has none yet.
func (c *Cursors) Get(ctx context.Context, destination string) (proto.Position, bool, error) {
	var lsn, seq int64
	err := c.pool.QueryRow(ctx, c.qGet, destination).Scan(&lsn, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return proto.Position{}, false, nil
	}
	if err != nil {
		return proto.Position{}, false, fmt.Errorf("reading cursor %s: %w", destination, err)
	}
	return proto.Position{LSN: proto.LSN(lsn), Seq: uint64(seq)}, true, nil
}

// Load returns the cursor of every destination of partition.
func (c *Cursors) Load(ctx context.Context, partition int) (map[string]proto.Position, error) {
	return c.load(ctx, partition, c.qLoad, partition)
}

// LoadSome returns the cursors of destinations of partition, in one
// statement; a destination without a cursor has none in the map.
func (c *Cursors) LoadSome(ctx context.Context, partition int, destinations []string) (map[string]proto.Position, error) {
	return c.load(ctx, partition, c.qLoadSome, partition, destinations)
}

func (c *Cursors) load(ctx context.Context, partition int, q string, args ...any) (map[string]proto.Position, error) {
	rows, err := c.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("loading cursors of partition %d: %w", partition, err)
	}
	defer rows.Close()
	out := make(map[string]proto.Position)
	for rows.Next() {
		var d string
		var lsn, seq int64
		if err := rows.Scan(&d, &lsn, &seq); err != nil {
			return nil, fmt.Errorf("loading cursors of partition %d: %w", partition, err)
		}
		out[d] = proto.Position{LSN: proto.LSN(lsn), Seq: uint64(seq)}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loading cursors of partition %d: %w", partition, err)
	}
	return out, nil
}

// All returns every cursor, ordered by destination, for status.
func (c *Cursors) All(ctx context.Context) ([]Cursor, error) {
	rows, err := c.pool.Query(ctx, c.qAll)
	if err != nil {
		return nil, fmt.Errorf("listing cursors: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Cursor, error) {
		var cu Cursor
		var lsn, seq int64
		err := r.Scan(&cu.Destination, &cu.Partition, &lsn, &seq, &cu.Term, &cu.UpdatedAt)
		cu.Position = proto.Position{LSN: proto.LSN(lsn), Seq: uint64(seq)}
		return cu, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing cursors: %w", err)
	}
	return out, nil
}
