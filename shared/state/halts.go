package state

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// HaltLedger keeps the halts of dead-lettered packs as state: a dead
// letter is a message, and the DLQ drops it at its max age (or anyone may
// delete it), while a pack that was never indexed is still missing from
// every snapshot. A halt seen on the DLQ is recorded here, keyed by its
// dead letter's sequence and time, and ends only when sluice ends it: a
// replay or purge of its dead letter, or resyncs that cover it, published
// (services/sluice/internal/api halts.go). The halt itself is the API's
// JSON, opaque here.
type HaltLedger struct {
	pool                       *pgxpool.Pool
	qRecord, qList, qEnd, qAll string
}

// LedgerHalt is one recorded halt.
type LedgerHalt struct {
	Seq            uint64
	DeadLetteredAt time.Time
	Halt           json.RawMessage
}

// MaxLedgerHalts bounds the halts List returns (the oldest first).
const MaxLedgerHalts = 10000

// NewHaltLedger returns the halt ledger of the state schema (DefaultSchema
// when empty). Migrate must have run.
func NewHaltLedger(pool *pgxpool.Pool, schema string) *HaltLedger {
	if schema == "" {
		schema = DefaultSchema
	}
	t := pgx.Identifier{schema, "pack_halts"}.Sanitize()
	return &HaltLedger{
		pool: pool,
		qRecord: `INSERT INTO ` + t + ` (dlq_seq, dead_lettered_at, halt)
			SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::jsonb[])
			ON CONFLICT (dlq_seq, dead_lettered_at) DO NOTHING`,
		qList: `SELECT dlq_seq, dead_lettered_at, halt FROM ` + t + ` ORDER BY dlq_seq LIMIT $1`,
		qEnd:  `DELETE FROM ` + t + ` WHERE dlq_seq = ANY($1::bigint[])`,
		qAll:  `DELETE FROM ` + t,
	}
}

func haltsDDL(s string) []string {
	return []string{
		// The halt ledger (halts.go): additive, no version bump; an older
		// build ignores it (and reads halts from the DLQ alone).
		`CREATE TABLE IF NOT EXISTS ` + s + `.pack_halts (
			dlq_seq          bigint NOT NULL,
			dead_lettered_at timestamptz NOT NULL,
			halt             jsonb NOT NULL,
			recorded_at      timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (dlq_seq, dead_lettered_at))`,
	}
}

// Record adds the halts not recorded yet.
func (l *HaltLedger) Record(ctx context.Context, halts []LedgerHalt) error {
	if len(halts) == 0 {
		return nil
	}
	seqs, ats, bodies := make([]int64, len(halts)), make([]time.Time, len(halts)), make([]string, len(halts))
	for i, h := range halts {
		seqs[i], ats[i], bodies[i] = int64(h.Seq), h.DeadLetteredAt, string(h.Halt)
	}
	if _, err := l.pool.Exec(ctx, l.qRecord, seqs, ats, bodies); err != nil {
		return fmt.Errorf("recording %d halts: %w", len(halts), err)
	}
	return nil
}

// List returns the recorded halts, oldest dead letter first, at most
// MaxLedgerHalts.
func (l *HaltLedger) List(ctx context.Context) ([]LedgerHalt, error) {
	rows, err := l.pool.Query(ctx, l.qList, MaxLedgerHalts)
	if err != nil {
		return nil, fmt.Errorf("reading the halt ledger: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LedgerHalt, error) {
		var h LedgerHalt
		var seq int64
		err := r.Scan(&seq, &h.DeadLetteredAt, &h.Halt)
		h.Seq = uint64(seq)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the halt ledger: %w", err)
	}
	return out, nil
}

// End removes the halts of the dead letters at seqs.
func (l *HaltLedger) End(ctx context.Context, seqs ...uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	s := make([]int64, len(seqs))
	for i, v := range seqs {
		s[i] = int64(v)
	}
	if _, err := l.pool.Exec(ctx, l.qEnd, s); err != nil {
		return fmt.Errorf("ending halts %v: %w", seqs, err)
	}
	return nil
}

// EndAll removes every halt (the indexer's dead letters purged at once).
func (l *HaltLedger) EndAll(ctx context.Context) error {
	if _, err := l.pool.Exec(ctx, l.qAll); err != nil {
		return fmt.Errorf("ending every halt: %w", err)
	}
	return nil
}
