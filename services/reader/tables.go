package reader

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/proto"
)

// migrate creates the reader's own tables in the state schema. Readers that
// start together (an active one and its standbys) serialize on an advisory
// lock: concurrent CREATE TABLE IF NOT EXISTS can still collide in
// Postgres's catalog (unique violation on pg_type).
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('sluice.reader.migrate'))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s+`.reader_backfill (
			slot text PRIMARY KEY,
			state text NOT NULL CHECK (state IN ('running', 'done')),
			consistent_point text,
			updated_at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE IF NOT EXISTS `+s+`.reader_halted (
			slot text NOT NULL,
			source_table text NOT NULL,
			reason text NOT NULL,
			at_lsn text NOT NULL,
			halted_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (slot, source_table))`)
		return err
	})
	if err != nil {
		return fmt.Errorf("creating the reader's state tables: %w", err)
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

func loadHalts(ctx context.Context, pool *pgxpool.Pool, schema, slot string) (map[string]string, error) {
	rows, err := pool.Query(ctx, `SELECT source_table, reason FROM `+pgx.Identifier{schema, "reader_halted"}.Sanitize()+` WHERE slot = $1`, slot)
	if err != nil {
		return nil, fmt.Errorf("loading halted tables: %w", err)
	}
	out := map[string]string{}
	for rows.Next() {
		var t, r string
		if err := rows.Scan(&t, &r); err != nil {
			return nil, err
		}
		out[t] = r
	}
	return out, rows.Err()
}

// fetchColumns reads the text form of cols of one source row by its key (the
// key's text forms, cast to the key columns' types so the primary key index
// serves the lookup). Identifiers come from the validated config and the
// source catalog and are quoted.
func fetchColumns(ctx context.Context, src *pgxpool.Pool, table string, keyCols, keyTypes []string, keyVals [][]byte, cols []string) ([][]byte, bool, error) {
	schema, name, _ := strings.Cut(table, ".")
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = pgx.Identifier{c}.Sanitize() + "::text"
	}
	where := make([]string, len(keyCols))
	args := make([]any, len(keyCols))
	for i, k := range keyCols {
		where[i] = fmt.Sprintf("%s = $%d::text::%s", pgx.Identifier{k}.Sanitize(), i+1, keyTypes[i])
		args[i] = string(keyVals[i])
	}
	q := "SELECT " + strings.Join(sel, ", ") + " FROM " + pgx.Identifier{schema, name}.Sanitize() + " WHERE " + strings.Join(where, " AND ")
	rows, err := src.Query(ctx, q, args...)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, false, rows.Err()
	}
	out := make([][]byte, len(cols))
	ptrs := make([]any, len(cols))
	vals := make([]*string, len(cols))
	for i := range ptrs {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, false, err
	}
	for i, v := range vals {
		if v != nil {
			out[i] = []byte(*v)
		}
	}
	return out, true, rows.Err()
}
