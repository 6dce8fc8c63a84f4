package reader

// The active reader's periodic checks of the source, beside the stream: the
// WAL the slot retains and dropped tables (every 10 s), and schema changes
// that write no row to the stream and the publication rules
// (publication.go), every second.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/services/reader/internal/capture"
	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/natsx"
)

func (r *Reader) pollRetained(ctx context.Context, src *pgxpool.Pool, tables []source.Table, opts *capture.Options) {
	for {
		var retained *int64
		// A standby has no current WAL position: its replayed one.
		err := src.QueryRow(ctx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END - restart_lsn)::int8
			FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, r.cfg.Source.Slot).Scan(&retained)
		if err == nil && retained != nil {
			r.metrics.RetainedBytes.Set(float64(*retained))
		}
		r.checkReplaced(ctx, src, tables)
		every := 10 * time.Second
		if r.pollEvery > 0 {
			every = r.pollEvery
		}
		if !natsx.Sleep(ctx, every) {
			return
		}
	}
}

// pollSchemas runs the periodic schema check (checkSchemas) every second.
func (r *Reader) pollSchemas(ctx context.Context, src *pgxpool.Pool, tables []source.Table, opts *capture.Options) {
	every := time.Second
	if r.schemaEvery > 0 {
		every = r.schemaEvery
	}
	for {
		if err := r.checkSchemas(ctx, src, tables, opts); err != nil && ctx.Err() == nil {
			r.log.Warn("periodic schema check failed", "error", err)
		}
		if !natsx.Sleep(ctx, every) {
			return
		}
	}
}

// checkSchemas is the periodic schema check (capture.CheckSchema) of every
// streaming table that is not halted, in one catalog query: a column added
// with a default, renamed, or dropped and added again is resynced without
// waiting for the table's next change to bring a Relation message. The
// source's WAL position is read first; once every table is checked (and
// each resync queued, in the holds) it is the reader's schemaChecked: a
// schema change the client saw committed before that position is visible
// to the query that follows.
func (r *Reader) checkSchemas(ctx context.Context, src *pgxpool.Pool, tables []source.Table, opts *capture.Options) error {
	if r.state.Snapshot().Phase != "streaming" {
		return nil
	}
	at, err := sourcePosition(ctx, src)
	if err != nil {
		return err
	}
	// The publication rules first: a table it captures a subset of is
	// resynced (repaired) or halted, before its schema is looked at.
	if !r.rules.noPublicationCheck {
		if err := r.checkPublication(ctx, src, at, opts.AutoResync != nil); err != nil {
			return err
		}
	}
	if opts.AutoResync == nil { // the rule is off: nothing is looked for
		r.schemaChecked.Store(uint64(at))
		return nil
	}
	var oids []int64
	var relids []uint32
	for _, t := range tables {
		if r.state.Halted(t.Name) == "" {
			oids, relids = append(oids, int64(t.OID)), append(relids, t.OID)
		}
	}
	rows, err := src.Query(ctx, `SELECT attrelid::int8, attname, atttypid::int8, atttypmod, attnum, attgenerated = '' FROM pg_catalog.pg_attribute
		WHERE attrelid = ANY($1::oid[]) AND attnum > 0 AND NOT attisdropped ORDER BY attrelid, attnum`, oids)
	if err != nil {
		return fmt.Errorf("reading the captured tables' columns: %w", err)
	}
	cols := map[uint32][]pgoutput.Column{} // live, not generated: what a Relation message lists
	nums := map[uint32]capture.ColumnNums{}
	var rel, oid int64
	var c pgoutput.Column
	var num int16
	var sent bool
	_, err = pgx.ForEachRow(rows, []any{&rel, &c.Name, &oid, &c.TypMod, &num, &sent}, func() error {
		if nums[uint32(rel)] == nil {
			nums[uint32(rel)] = capture.ColumnNums{}
		}
		nums[uint32(rel)][c.Name] = num
		if sent {
			c.TypeOID = uint32(oid)
			cols[uint32(rel)] = append(cols[uint32(rel)], c)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading the captured tables' columns: %w", err)
	}
	parts, err := source.LeafPartitions(ctx, src, relids)
	if err != nil {
		return err
	}
	var failed error
	for _, t := range tables {
		cur := cols[t.OID]
		if r.state.Halted(t.Name) != "" || len(cur) == 0 {
			continue // dropped: checkReplaced shows it
		}
		// A change the stream has not decoded yet is left to its Relation
		// message for one check: a resync queued before the stream knows
		// the new schema copies rows under the old one. Seen again a check
		// later, it is queued here (a DDL with no row change after it).
		early, _, err := capture.SchemaChange(ctx, opts.HasDefault, t.OID, capture.LastColumns(r.state, t), cur, capture.LastColumnNums(r.state, t), nums[t.OID])
		if err != nil {
			failed = errors.Join(failed, fmt.Errorf("%s: %w", t.Name, err))
			continue
		}
		if early != "" && !r.schemaSeen[t.Name] {
			r.schemaSeen[t.Name] = true
			failed = errors.Join(failed, fmt.Errorf("%s: a schema change the stream has not described yet (%s): checked again in a second", t.Name, early))
			continue
		}
		delete(r.schemaSeen, t.Name)
		reason, err := capture.CheckSchema(ctx, r.state, t, cur, nums[t.OID], opts.HasDefault, opts.AutoResync)
		if err != nil {
			failed = errors.Join(failed, fmt.Errorf("%s: %w", t.Name, err))
			continue
		}
		if reason != "" {
			r.log.Info("periodic schema check: a schema change rewrote existing rows without WAL; resyncing the table", "table", t.Name, "reason", reason)
		}
		if reason, err = capture.CheckPartitions(ctx, r.state, t, parts[t.OID], opts.AutoResync); err != nil {
			failed = errors.Join(failed, fmt.Errorf("%s: %w", t.Name, err))
		} else if reason != "" {
			r.log.Info("periodic schema check: partitions attached or detached; resyncing the table", "table", t.Name)
		}
	}
	if failed != nil {
		return failed
	}
	r.schemaChecked.Store(uint64(at))
	return nil
}

// checkReplaced marks, in the status, a captured table that was dropped
// (and perhaps created again) at the source: a DROP is not replicated and
// a table created again is not in the publication, so neither its old rows'
// removal nor its new rows would ever arrive. It is shown as halted (status,
// sluice wait's warnings, the halted-table alert); the stream goes on with
// whatever of the old table is still in the WAL.
func (r *Reader) checkReplaced(ctx context.Context, src *pgxpool.Pool, tables []source.Table) {
	for _, t := range tables {
		if r.state.Halted(t.Name) != "" {
			continue
		}
		var exists bool
		if err := src.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = $1::oid)`, int64(t.OID)).Scan(&exists); err != nil || exists {
			continue
		}
		reason := fmt.Sprintf("table %s (relation %d) was dropped at the source; a DROP is not replicated and a table created again under its name is not captured: resync it, then restart the reader", t.Name, t.OID)
		r.log.Error("captured table dropped at the source", "table", t.Name, "relation", t.OID)
		r.state.SetHalted(t.Name, reason)
		r.metrics.Halted.WithLabelValues(t.Name, "dropped").Set(1)
	}
}
