package reader

// The publication rules at start and in the periodic schema check
// (source.CheckPublication says what they are): a publication sluice
// created is repaired and what the stream missed of a table is resynced;
// any other is refused at start and, found while running, halts the
// tables it captures a subset of.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
)

// ReasonPublication is the auto-resync and halt reason of a table the
// publication captured a subset of.
const ReasonPublication = "publication"

// ensurePublication runs the start check. A refused publication halts,
// when the slot already streamed, the tables it concerns at the slot's
// confirmed position: the WAL after it is decoded under the publication as
// it was when written, so a fix does not bring back what it filtered, and
// only a resync does. The position read first is where the periodic check
// takes over (pubGood).
func (r *Reader) ensurePublication(ctx context.Context, src, statePool *pgxpool.Pool) (source.Ensured, error) {
	at, err := sourcePosition(ctx, src)
	if err != nil {
		return source.Ensured{}, err
	}
	// Created and repaired where the reader writes (a standby's catalog is
	// the primary's, replayed): checked there too, then replayed by the
	// standby before the slot and the session read it there.
	ens, err := source.EnsurePublication(ctx, r.writer(src), r.cfg.Source.Publication, r.cfg.Source.Tables)
	if err == nil {
		err = r.catchUp(ctx, src)
	}
	if err != nil {
		if len(ens.Check.Problems) > 0 {
			sl, lerr := source.LookupSlot(ctx, src, r.cfg.Source.Slot)
			if lerr == nil && sl.Exists {
				for _, t := range ens.Check.Tables() {
					if herr := saveHalt(ctx, statePool, r.cfg.State.Schema, r.cfg.Source.Slot, t, r.publicationReason(ens.Check, t), sl.ConfirmedFlush); herr != nil {
						return ens, fmt.Errorf("%w (and recording the halt of %s: %w)", err, t, herr)
					}
				}
			}
		}
		return ens, err
	}
	r.pubGood = at
	return ens, nil
}

// publicationReason is the halt reason of table for c's problems.
func (r *Reader) publicationReason(c source.PublicationCheck, table string) string {
	var parts []string
	for _, p := range c.Problems {
		if p.Table == table {
			parts = append(parts, p.What+": run "+p.Fix)
		}
	}
	return fmt.Sprintf("%s: publication %s captures a subset of it: %s; then resync it (sluice resync --table %s): the changes made meanwhile are missing",
		ReasonPublication, r.cfg.Source.Publication, strings.Join(parts, "; "), table)
}

// checkPublication is the publication part of the periodic schema check,
// at source position at (read before it). A publication sluice created is
// repaired and each table it captured a subset of is resynced (the stream
// missed its changes since the ALTER). Any other halts those tables, at
// the position of the last check that found it right (every change the
// stream missed is after it): persisted, shown in status with what to run,
// and the replication session restarts so that it no longer carries them.
// The next start refuses it until it is fixed; a resync then clears the
// halt. A repair that fails halts them the same way.
func (r *Reader) checkPublication(ctx context.Context, src *pgxpool.Pool, at proto.LSN, autoResync bool) error {
	pub := r.cfg.Source.Publication
	c, err := source.CheckPublication(ctx, src, pub, r.cfg.Source.Tables)
	if err != nil {
		return err
	}
	if !c.Exists {
		return fmt.Errorf("publication %s does not exist: the replication session fails until it is created again (a restart of the reader creates it)", pub)
	}
	if err := r.queuePublicationResyncs(ctx); err != nil {
		return err
	}
	if len(c.Problems) == 0 {
		r.pubGood = at
		return nil
	}
	repaired := false
	if c.Repairable() && autoResync {
		// A repair that fails (a role that may not alter it) halts the
		// tables as for the user's publication, rather than leave them a
		// subset with only a log line.
		err := source.RepairPublication(ctx, r.writer(src), pub, c)
		if err != nil {
			r.log.Error("periodic check: repairing the publication sluice created failed; halting the tables it captures a subset of", "publication", pub, "error", err)
		}
		repaired = err == nil
	}
	if repaired {
		r.log.Warn("periodic check: the publication sluice created captured a subset of tables; repaired it, resyncing them", "publication", pub, "problems", c.Err(pub).Error())
		// Repaired first, so that the resync copies under the repaired
		// publication; queued until the queue takes them (a state database
		// down now is retried by the next check).
		for _, t := range c.Tables() {
			if r.state.Halted(t) == "" { // a halted table's resync copies it all
				r.pubResyncs[t] = r.publicationReason(c, t)
			}
		}
		return r.queuePublicationResyncs(ctx)
	}
	halted := false
	for _, t := range c.Tables() {
		if r.state.Halted(t) != "" {
			continue
		}
		reason := r.publicationReason(c, t)
		if err := saveHalt(ctx, r.deps.State, r.cfg.State.Schema, r.cfg.Source.Slot, t, reason, r.pubGood); err != nil {
			return fmt.Errorf("recording halt of %s: %w", t, err)
		}
		r.log.Error("table halted: the publication captures a subset of it", "table", t, "reason", ReasonPublication, "error", reason)
		r.state.SetHaltedAt(t, r.pubGood)
		r.state.SetHalted(t, reason)
		r.metrics.Halted.WithLabelValues(t, ReasonPublication).Set(1)
		halted = true
	}
	if halted {
		r.restartSession()
	}
	return nil
}

// queuePublicationResyncs queues the resyncs a repair left due.
func (r *Reader) queuePublicationResyncs(ctx context.Context) error {
	for _, t := range slices.Sorted(maps.Keys(r.pubResyncs)) {
		if err := r.autoResync(ctx, r.deps.State, t, ReasonPublication, r.pubResyncs[t]); err != nil {
			return fmt.Errorf("queueing the resync of %s after repairing the publication: %w", t, err)
		}
		delete(r.pubResyncs, t)
	}
	return nil
}

// checkPublicationFixed refuses to resync a table halted by the
// publication rules while the publication still captures a subset of it.
func (r *Reader) checkPublicationFixed(ctx context.Context, src *pgxpool.Pool, table string) error {
	c, err := source.CheckPublication(ctx, src, r.cfg.Source.Publication, []string{table})
	if err != nil {
		return err
	}
	return c.Err(r.cfg.Source.Publication)
}

// sourcePosition is the source's current WAL position (replayed, on a
// standby).
func sourcePosition(ctx context.Context, src *pgxpool.Pool) (proto.LSN, error) {
	var pos string
	if err := src.QueryRow(ctx, `SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END::text`).Scan(&pos); err != nil {
		return 0, fmt.Errorf("reading the source's WAL position: %w", err)
	}
	at, err := proto.ParseLSN(pos)
	if err != nil {
		return 0, fmt.Errorf("reading the source's WAL position: %w", err)
	}
	return at, nil
}

// restartSession ends the running replication session; stream starts the
// next, which reads the halted tables afresh.
func (r *Reader) restartSession() {
	r.mu.Lock()
	cancel := r.sessionCancel
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}
