package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Resync states. A request is queued by the API, taken by the active
// reader (running), and ends done or failed.
const (
	ResyncQueued  = "queued"
	ResyncRunning = "running"
	ResyncDone    = "done"
	ResyncFailed  = "failed"
)

// Resync is one resync request: a re-copy of a table, or of one
// destination's rows of it, while the stream keeps flowing
// (services/reader resync.go). Its progress is persisted with it after
// every chunk, so a reader killed mid-resync continues from LastKey.
type Resync struct {
	ID    int64  `json:"id"`
	Slot  string `json:"slot"`
	Table string `json:"table"`
	// Destination and Value name the one destination a scoped resync
	// re-copies (Value is the routing value its rows carry); both empty:
	// every row of the table.
	Destination string  `json:"destination,omitempty"`
	Value       *string `json:"value,omitempty"`
	State       string  `json:"state"`
	Reason      string  `json:"reason,omitempty"` // who asked: operator, added, schema_change, slot_lost, ...
	Error       string  `json:"error,omitempty"`
	// LastKey is the primary key (text forms, in key column order) of the
	// last row of the last chunk published; nil before the first.
	LastKey []string `json:"last_key,omitempty"`
	// BoundLSN is the low watermark of the first chunk: at the end, rows
	// of the scope older than it that the resync did not re-copy (and the
	// stream did not change since) are cleared.
	BoundLSN string `json:"bound_lsn,omitempty"`
	// EndLSN is the position of the resync's last message in the stream:
	// a snapshot whose through_lsn is at or above it holds the resync.
	EndLSN    string `json:"end_lsn,omitempty"`
	Rows      int64  `json:"rows_copied"`
	Dropped   int64  `json:"rows_dropped"` // chunk rows the stream changed inside their window
	Chunks    int64  `json:"chunks"`
	Estimated int64  `json:"estimated_rows"`
	// Halted is set when the table was halted as the resync started: its
	// halt is cleared when the resync completes.
	Halted      bool       `json:"halted,omitempty"`
	RequestedAt time.Time  `json:"requested_at"`
	StartedAt   *time.Time `json:"started_at,omitempty"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

// Active reports whether the request is queued or running.
func (r Resync) Active() bool { return r.State == ResyncQueued || r.State == ResyncRunning }

// ErrResyncNotFound: no request with that id.
var ErrResyncNotFound = errors.New("resync not found")

// Resyncs is the resync queue in the state database. Safe for concurrent
// use.
type Resyncs struct {
	pool  *pgxpool.Pool
	table string
}

// NewResyncs returns the queue of schema (Migrate creates its table).
func NewResyncs(pool *pgxpool.Pool, schema string) *Resyncs {
	if schema == "" {
		schema = DefaultSchema
	}
	return &Resyncs{pool: pool, table: pgx.Identifier{schema, "resyncs"}.Sanitize()}
}

// resyncsDDL creates the queue (additive: no version bump).
func resyncsDDL(s string) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + s + `.resyncs (
			id             bigserial PRIMARY KEY,
			slot           text NOT NULL,
			source_table   text NOT NULL,
			destination    text,
			routing_value  text,
			state          text NOT NULL CHECK (state IN ('queued','running','done','failed')),
			reason         text NOT NULL DEFAULT 'operator',
			error          text,
			last_key       jsonb,
			bound_lsn      text,
			end_lsn        text,
			rows_copied    bigint NOT NULL DEFAULT 0,
			rows_dropped   bigint NOT NULL DEFAULT 0,
			chunks         bigint NOT NULL DEFAULT 0,
			estimated_rows bigint NOT NULL DEFAULT 0,
			halted         boolean NOT NULL DEFAULT false,
			requested_at   timestamptz NOT NULL DEFAULT now(),
			started_at     timestamptz,
			finished_at    timestamptz,
			updated_at     timestamptz NOT NULL DEFAULT now())`,
		`CREATE INDEX IF NOT EXISTS resyncs_active_idx ON ` + s + `.resyncs (slot, source_table) WHERE state IN ('queued','running')`,
	}
}

const resyncCols = `id, slot, source_table, coalesce(destination, ''), routing_value, state, reason, coalesce(error, ''),
	last_key, coalesce(bound_lsn, ''), coalesce(end_lsn, ''), rows_copied, rows_dropped, chunks, estimated_rows, halted,
	requested_at, started_at, finished_at, updated_at`

func scanResync(row pgx.Row) (Resync, error) {
	var r Resync
	var key []byte
	err := row.Scan(&r.ID, &r.Slot, &r.Table, &r.Destination, &r.Value, &r.State, &r.Reason, &r.Error, &key,
		&r.BoundLSN, &r.EndLSN, &r.Rows, &r.Dropped, &r.Chunks, &r.Estimated, &r.Halted,
		&r.RequestedAt, &r.StartedAt, &r.FinishedAt, &r.UpdatedAt)
	if err != nil {
		return r, err
	}
	if key != nil {
		if err := json.Unmarshal(key, &r.LastKey); err != nil {
			return r, fmt.Errorf("decoding last_key of resync %d: %w", r.ID, err)
		}
	}
	return r, nil
}

// Enqueue inserts a queued request and returns it.
func (q *Resyncs) Enqueue(ctx context.Context, slot, table, destination string, value *string, reason string) (Resync, error) {
	var dest *string
	if destination != "" {
		dest = &destination
	}
	if reason == "" {
		reason = "operator"
	}
	r, err := scanResync(q.pool.QueryRow(ctx, `INSERT INTO `+q.table+` (slot, source_table, destination, routing_value, state, reason)
		VALUES ($1, $2, $3, $4, 'queued', $5) RETURNING `+resyncCols, slot, table, dest, value, reason))
	if err != nil {
		return r, fmt.Errorf("queueing a resync of %s: %w", table, err)
	}
	return r, nil
}

// Get returns one request.
func (q *Resyncs) Get(ctx context.Context, id int64) (Resync, error) {
	r, err := scanResync(q.pool.QueryRow(ctx, `SELECT `+resyncCols+` FROM `+q.table+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("%w: %d", ErrResyncNotFound, id)
	}
	if err != nil {
		return r, fmt.Errorf("reading resync %d: %w", id, err)
	}
	return r, nil
}

// List returns slot's requests, newest first, at most limit (0: 100).
func (q *Resyncs) List(ctx context.Context, slot string, limit int) ([]Resync, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := q.pool.Query(ctx, `SELECT `+resyncCols+` FROM `+q.table+` WHERE slot = $1 ORDER BY id DESC LIMIT $2`, slot, limit)
	if err != nil {
		return nil, fmt.Errorf("listing resyncs: %w", err)
	}
	defer rows.Close()
	out := []Resync{}
	for rows.Next() {
		r, err := scanResync(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Next returns the request the active reader of slot works on: the running
// one (a reader that died left it running: it is continued), else the
// oldest queued one of a table with none running, marked running. ok is
// false when nothing is queued. Only the holder of the reader lease calls
// it, so two readers never run the same request.
func (q *Resyncs) Next(ctx context.Context, slot string) (Resync, bool, error) {
	r, err := scanResync(q.pool.QueryRow(ctx, `SELECT `+resyncCols+` FROM `+q.table+`
		WHERE slot = $1 AND state = 'running' ORDER BY id LIMIT 1`, slot))
	if err == nil {
		return r, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return r, false, fmt.Errorf("reading the running resync: %w", err)
	}
	r, err = scanResync(q.pool.QueryRow(ctx, `UPDATE `+q.table+` SET state = 'running', started_at = now(), updated_at = now()
		WHERE id = (SELECT id FROM `+q.table+` q WHERE slot = $1 AND state = 'queued'
			AND NOT EXISTS (SELECT 1 FROM `+q.table+` o WHERE o.slot = q.slot AND o.source_table = q.source_table AND o.state = 'running')
			ORDER BY id LIMIT 1)
		RETURNING `+resyncCols, slot))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("starting the next resync: %w", err)
	}
	return r, true, nil
}

// Start records what a request knows as it starts (or restarts): whether
// its table is halted and the estimated row count.
func (q *Resyncs) Start(ctx context.Context, id int64, halted bool, estimated int64) error {
	_, err := q.pool.Exec(ctx, `UPDATE `+q.table+` SET halted = halted OR $2, estimated_rows = $3, updated_at = now() WHERE id = $1`, id, halted, estimated)
	if err != nil {
		return fmt.Errorf("starting resync %d: %w", id, err)
	}
	return nil
}

// Reset forgets a running request's progress (it starts over from its
// first chunk, with a new bound).
func (q *Resyncs) Reset(ctx context.Context, id int64) error {
	_, err := q.pool.Exec(ctx, `UPDATE `+q.table+` SET last_key = NULL, bound_lsn = NULL, rows_copied = 0, rows_dropped = 0, chunks = 0, updated_at = now() WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("resetting resync %d: %w", id, err)
	}
	return nil
}

// Chunk records a published chunk: its last key, the bound (set by the
// first chunk only) and the counts.
func (q *Resyncs) Chunk(ctx context.Context, id int64, lastKey []string, bound string, rows, dropped int64) error {
	key, err := json.Marshal(lastKey)
	if err != nil {
		return err
	}
	if lastKey == nil {
		key = nil
	}
	_, err = q.pool.Exec(ctx, `UPDATE `+q.table+` SET last_key = coalesce($2::jsonb, last_key), bound_lsn = coalesce(bound_lsn, $3),
		rows_copied = rows_copied + $4, rows_dropped = rows_dropped + $5, chunks = chunks + 1, updated_at = now()
		WHERE id = $1 AND state = 'running'`, id, key, bound, rows, dropped)
	if err != nil {
		return fmt.Errorf("recording a chunk of resync %d: %w", id, err)
	}
	return nil
}

// Finish ends a request: done with its end position, or failed with err.
func (q *Resyncs) Finish(ctx context.Context, id int64, endLSN string, failure error) error {
	st, msg := ResyncDone, ""
	if failure != nil {
		st, msg = ResyncFailed, failure.Error()
	}
	_, err := q.pool.Exec(ctx, `UPDATE `+q.table+` SET state = $2, error = nullif($3, ''), end_lsn = nullif($4, ''),
		finished_at = now(), updated_at = now() WHERE id = $1`, id, st, msg, endLSN)
	if err != nil {
		return fmt.Errorf("finishing resync %d: %w", id, err)
	}
	return nil
}
