package state

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaVersion is the state schema version this build writes and reads.
const SchemaVersion = 1

// DefaultSchema is the schema used when config state.schema is empty.
const DefaultSchema = "sluice"

// Migrate creates the state schema and its tables if they do not exist. It
// is idempotent and safe when several processes boot at once: migrations
// serialize on a transaction-scoped advisory lock, and a concurrent CREATE
// that still collides (unique_violation, duplicate schema or table) is
// retried. It refuses a database whose schema is newer than SchemaVersion.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if schema == "" {
		schema = DefaultSchema
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = migrate(ctx, pool, schema); err == nil || !concurrentDDL(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("migrating state schema %s: %w", schema, err)
	}
	return nil
}

func concurrentDDL(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "23505", // unique_violation (pg_namespace / pg_type / pg_class names)
		"42P06", // duplicate_schema
		"42P07", // duplicate_table
		"40P01": // deadlock_detected
		return true
	}
	return false
}

// MigrateTables creates a component's own tables in the state schema (the
// reader's backfill and halt tables): ddl runs in one transaction under
// the state schema's migration lock, so processes that boot together
// serialize with each other and with Migrate, and a concurrent CREATE that
// still collides is retried. Each statement must be idempotent (IF NOT
// EXISTS). Migrate must have run.
func MigrateTables(ctx context.Context, pool *pgxpool.Pool, schema, component string, ddl ...string) error {
	if schema == "" {
		schema = DefaultSchema
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = underMigrationLock(ctx, pool, schema, func(tx pgx.Tx) error {
			for _, q := range ddl {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil || !concurrentDDL(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("creating the %s tables in state schema %s: %w", component, schema, err)
	}
	return nil
}

// underMigrationLock runs fn in a transaction holding the state schema's
// migration lock (transaction-scoped advisory lock) and commits it.
func underMigrationLock(ctx context.Context, pool *pgxpool.Pool, schema string, fn func(pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('sluice.state.migrate:' || $1, 0))`, schema); err != nil {
		return fmt.Errorf("taking the migration lock: %w", err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return underMigrationLock(ctx, pool, schema, func(tx pgx.Tx) error { return migrateTx(ctx, tx, schema) })
}

func migrateTx(ctx context.Context, tx pgx.Tx, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	steps := []string{
		`CREATE SCHEMA IF NOT EXISTS ` + s,
		`CREATE TABLE IF NOT EXISTS ` + s + `.schema_version (
			id          int PRIMARY KEY DEFAULT 1 CHECK (id = 1),
			version     int NOT NULL,
			migrated_at timestamptz NOT NULL DEFAULT now())`,
	}
	for _, q := range steps {
		if _, err := tx.Exec(ctx, q); err != nil {
			return err
		}
	}
	var have int
	err := tx.QueryRow(ctx, `SELECT version FROM `+s+`.schema_version WHERE id = 1`).Scan(&have)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("reading schema_version: %w", err)
	case have > SchemaVersion:
		return fmt.Errorf("%w: %s.schema_version is %d, this build reads up to %d: upgrade sluice", ErrSchemaVersion, schema, have, SchemaVersion)
	}
	steps = []string{
		`CREATE TABLE IF NOT EXISTS ` + s + `.leases (
			name        text PRIMARY KEY,
			holder      text NOT NULL,
			term        bigint NOT NULL,
			acquired_at timestamptz,
			renewed_at  timestamptz,
			expires_at  timestamptz NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + s + `.cursors (
			destination text PRIMARY KEY,
			partition   int NOT NULL,
			lsn         bigint NOT NULL CHECK (lsn >= 0),
			seq         bigint NOT NULL CHECK (seq >= 0),
			term        bigint NOT NULL,
			updated_at  timestamptz NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS cursors_partition_idx ON ` + s + `.cursors (partition)`,
		// Every flush rewrites its destination's row (10,000 a second at
		// 10,000 tenants): room on each page keeps the updates HOT (no
		// index entries), about a third cheaper (BenchmarkAdvanceMany).
		`ALTER TABLE ` + s + `.cursors SET (fillfactor = 50)`,
		// Destination lifecycle (destinations.go): additive, so no version
		// bump; an older build simply ignores the table.
		`CREATE SEQUENCE IF NOT EXISTS ` + s + `.destination_states_version`,
		`CREATE TABLE IF NOT EXISTS ` + s + `.destination_states (
			destination text PRIMARY KEY,
			state       text NOT NULL CHECK (state IN ('active','paused','draining','drained','retired')),
			reason      text,
			changed_at  timestamptz NOT NULL DEFAULT now(),
			version     bigint NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS destination_states_version_idx ON ` + s + `.destination_states (version)`,
	}
	// The resync queue (resync.go): additive as well.
	steps = append(steps, resyncsDDL(s)...)
	steps = append(steps, haltsDDL(s)...)
	// Tenant tokens (tokens.go): additive.
	steps = append(steps, tokensDDL(s)...)
	for _, q := range steps {
		if _, err := tx.Exec(ctx, q); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+s+`.schema_version AS v (id, version) VALUES (1, $1)
		ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, migrated_at = now()
		WHERE v.version < EXCLUDED.version`, SchemaVersion); err != nil {
		return fmt.Errorf("writing schema_version: %w", err)
	}
	return nil
}
