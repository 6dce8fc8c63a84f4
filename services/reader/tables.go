package reader

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/capture"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/state"
)

// migrate creates the reader's own tables in the state schema, under the
// state schema's migration lock (state.MigrateTables): readers that start
// together (an active one and its standbys) serialize, as concurrent
// CREATE TABLE IF NOT EXISTS can still collide in Postgres's catalog
// (unique violation on pg_type).
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	return state.MigrateTables(ctx, pool, schema, "reader",
		`CREATE TABLE IF NOT EXISTS `+s+`.reader_backfill (
			slot text PRIMARY KEY,
			state text NOT NULL CHECK (state IN ('running', 'done')),
			consistent_point text,
			updated_at timestamptz NOT NULL DEFAULT now())`,
		`CREATE TABLE IF NOT EXISTS `+s+`.reader_halted (
			slot text NOT NULL,
			source_table text NOT NULL,
			reason text NOT NULL,
			at_lsn text NOT NULL,
			halted_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (slot, source_table))`,
		`CREATE TABLE IF NOT EXISTS `+s+`.reader_recovered (
			slot text NOT NULL,
			source_table text NOT NULL,
			halted_at_lsn text NOT NULL,
			end_lsn text NOT NULL,
			recovered_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (slot, source_table))`,
		`CREATE TABLE IF NOT EXISTS `+s+`.reader_kinds (
			slot text NOT NULL,
			source_table text NOT NULL,
			kinds jsonb NOT NULL,
			updated_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (slot, source_table))`)
}

// saveKinds records the column kinds the stream carries for table
// (capture.KnownKinds).
func saveKinds(ctx context.Context, pool *pgxpool.Pool, schema, slot, table string, k capture.Kinds) error {
	_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "reader_kinds"}.Sanitize()+` (slot, source_table, kinds)
		VALUES ($1, $2, $3) ON CONFLICT (slot, source_table) DO UPDATE SET kinds = EXCLUDED.kinds, updated_at = now()`, slot, table, k)
	return err
}

// loadKinds returns the column kinds saved for slot's tables.
func loadKinds(ctx context.Context, pool *pgxpool.Pool, schema, slot string) (map[string]capture.Kinds, error) {
	rows, err := pool.Query(ctx, `SELECT source_table, kinds FROM `+pgx.Identifier{schema, "reader_kinds"}.Sanitize()+` WHERE slot = $1`, slot)
	if err != nil {
		return nil, fmt.Errorf("loading column kinds: %w", err)
	}
	out := map[string]capture.Kinds{}
	for rows.Next() {
		var t string
		var k capture.Kinds
		if err := rows.Scan(&t, &k); err != nil {
			return nil, fmt.Errorf("loading column kinds: %w", err)
		}
		out[t] = k
	}
	return out, rows.Err()
}

// startKinds makes the known kinds of every table that has none saved (a
// first start) those its columns have now.
func startKinds(ctx context.Context, src *pgxpool.Pool, known *capture.KnownKinds, saved map[string]capture.Kinds, tables []source.Table, opts *capture.Options) error {
	for _, t := range tables {
		if _, ok := saved[t.Name]; ok {
			continue
		}
		pc, err := src.Acquire(ctx)
		if err != nil {
			return err
		}
		sc, err := capture.DescribeSchema(ctx, pc.Conn(), t, opts)
		pc.Release()
		if err != nil {
			return err
		}
		if err := known.Note(ctx, sc); err != nil {
			return err
		}
	}
	return nil
}

func backfillState(ctx context.Context, pool *pgxpool.Pool, schema, slot string) (string, error) {
	var st string
	err := pool.QueryRow(ctx, `SELECT state FROM `+pgx.Identifier{schema, "reader_backfill"}.Sanitize()+` WHERE slot = $1`, slot).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading backfill state of %s: %w", slot, err)
	}
	return st, nil
}

func setBackfill(ctx context.Context, pool *pgxpool.Pool, schema, slot, st string, cp proto.LSN) error {
	_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "reader_backfill"}.Sanitize()+` (slot, state, consistent_point)
		VALUES ($1, $2, $3) ON CONFLICT (slot) DO UPDATE SET state = EXCLUDED.state,
		consistent_point = EXCLUDED.consistent_point, updated_at = now()`, slot, st, cp.String())
	if err != nil {
		return fmt.Errorf("recording backfill %s of %s: %w", st, slot, err)
	}
	return nil
}

func saveHalt(ctx context.Context, pool *pgxpool.Pool, schema, slot, table, reason string, at proto.LSN) error {
	_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "reader_halted"}.Sanitize()+` (slot, source_table, reason, at_lsn)
		VALUES ($1, $2, $3, $4) ON CONFLICT (slot, source_table) DO NOTHING`, slot, table, reason, at.String())
	return err
}

// clearHalt deletes a table's halt record (a resync completed) and, in the
// same transaction, records the recovered halt (the latest per table), so
// that a restarted reader still tells `sluice wait` that the changes from
// the halt on are in a snapshot only once it is through the resync's end.
func clearHalt(ctx context.Context, pool *pgxpool.Pool, schema, slot, table string, rec *capture.Recovered) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM `+pgx.Identifier{schema, "reader_halted"}.Sanitize()+` WHERE slot = $1 AND source_table = $2`, slot, table); err != nil {
			return err
		}
		if rec == nil {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "reader_recovered"}.Sanitize()+` (slot, source_table, halted_at_lsn, end_lsn)
			VALUES ($1, $2, $3, $4) ON CONFLICT (slot, source_table) DO UPDATE SET halted_at_lsn = EXCLUDED.halted_at_lsn,
			end_lsn = EXCLUDED.end_lsn, recovered_at = now()`, slot, table, rec.HaltedAt.String(), rec.End.String())
		return err
	})
	if err != nil {
		return fmt.Errorf("clearing the halt of %s: %w", table, err)
	}
	return nil
}

// loadRecovered returns the latest recovered halt of each of slot's tables.
func loadRecovered(ctx context.Context, pool *pgxpool.Pool, schema, slot string) (map[string]capture.Recovered, error) {
	rows, err := pool.Query(ctx, `SELECT source_table, halted_at_lsn, end_lsn FROM `+pgx.Identifier{schema, "reader_recovered"}.Sanitize()+` WHERE slot = $1`, slot)
	if err != nil {
		return nil, fmt.Errorf("loading recovered halts: %w", err)
	}
	out := map[string]capture.Recovered{}
	for rows.Next() {
		var t, at, end string
		if err := rows.Scan(&t, &at, &end); err != nil {
			return nil, fmt.Errorf("loading recovered halts: %w", err)
		}
		a, err1 := proto.ParseLSN(at)
		e, err2 := proto.ParseLSN(end)
		if err1 != nil || err2 != nil {
			continue
		}
		out[t] = capture.Recovered{HaltedAt: a, End: e}
	}
	return out, rows.Err()
}

// loadHalts returns the halted tables of slot: the reason of each, and the
// position recorded with it (at_lsn: its first change not carried).
func loadHalts(ctx context.Context, pool *pgxpool.Pool, schema, slot string) (map[string]string, map[string]proto.LSN, error) {
	rows, err := pool.Query(ctx, `SELECT source_table, reason, at_lsn FROM `+pgx.Identifier{schema, "reader_halted"}.Sanitize()+` WHERE slot = $1`, slot)
	if err != nil {
		return nil, nil, fmt.Errorf("loading halted tables: %w", err)
	}
	out, at := map[string]string{}, map[string]proto.LSN{}
	for rows.Next() {
		var t, r, l string
		if err := rows.Scan(&t, &r, &l); err != nil {
			return nil, nil, err
		}
		out[t] = r
		if lsn, err := proto.ParseLSN(l); err == nil {
			at[t] = lsn
		}
	}
	return out, at, rows.Err()
}
