package reader

// Failover on the same slot (Postgres 17+, ADR 0039): the slot is created
// with FAILOVER true, an existing one is altered to it, and the reader
// checks every poll what the primary can tell about its standbys, for
// `sluice status`. A slot that was not synchronized (before 17, or no
// standby configured) is gone after a promotion: prepareSlot's slot_lost
// repair copies every table again, and the status says why.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/natsx"
)

// serverMajor is the source's Postgres major version.
func serverMajor(ctx context.Context, src *pgxpool.Pool) (int, error) {
	var v int
	if err := src.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading the source's server version: %w", err)
	}
	return v / 10000, nil
}

// createSlot creates the logical slot name on conn. From Postgres 17 a
// permanent slot is created with FAILOVER true, so standbys that run
// sync_replication_slots keep a copy a promotion can resume on (a temporary
// slot cannot fail over). exportSnapshot exports the slot's snapshot for the
// backfill.
func (r *Reader) createSlot(ctx context.Context, conn *pgconn.PgConn, major int, name string, temporary, exportSnapshot bool) (pglogrepl.CreateReplicationSlotResult, error) {
	// A slot on a standby cannot fail over (Postgres refuses it): its
	// standby is the one that would be promoted.
	if major < source.FailoverVersion || temporary || r.rules.noSlotFailover || r.standby {
		action := "NOEXPORT_SNAPSHOT"
		if exportSnapshot {
			action = "EXPORT_SNAPSHOT"
		}
		return pglogrepl.CreateReplicationSlot(ctx, conn, name, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
			Mode: pglogrepl.LogicalReplication, SnapshotAction: action, Temporary: temporary})
	}
	snap := "nothing"
	if exportSnapshot {
		snap = "export"
	}
	// name is a validated slot name (lowercase letters, digits, _).
	sql := fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (SNAPSHOT '%s', FAILOVER true)", name, snap)
	return pglogrepl.ParseCreateReplicationSlot(conn.Exec(ctx, sql))
}

// ensureFailover turns failover on for an existing slot that has it off
// (created by an older sluice, or before an upgrade to 17), with
// ALTER_REPLICATION_SLOT on a replication connection. The slot must not be
// in use: session calls it before it starts streaming. A failure is logged
// and left to the next session (the status shows the flag).
func (r *Reader) ensureFailover(ctx context.Context, src *pgxpool.Pool) {
	if r.rules.noSlotFailover || r.standby {
		return
	}
	major, err := serverMajor(ctx, src)
	if err != nil || major < source.FailoverVersion {
		return
	}
	var failover, synced bool
	err = src.QueryRow(ctx, `SELECT failover, synced FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, r.cfg.Source.Slot).Scan(&failover, &synced)
	if err != nil || failover {
		return
	}
	conn, err := r.replicationConn(ctx)
	if err != nil {
		r.log.Warn("turning failover on for the replication slot", "error", err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER_REPLICATION_SLOT %s (FAILOVER true)", r.cfg.Source.Slot)).ReadAll(); err != nil {
		r.log.Warn("turning failover on for the replication slot (ALTER_REPLICATION_SLOT ... (FAILOVER true)): a promoted standby will not have it", "error", err)
		return
	}
	r.log.Info("replication slot altered: failover on (standbys with sync_replication_slots = on keep a copy)")
}

// pollFailover reads the failover check every poll (10 s) for the status,
// and logs when its verdict changes.
func (r *Reader) pollFailover(ctx context.Context, src *pgxpool.Pool) {
	every := 10 * time.Second
	if r.pollEvery > 0 {
		every = r.pollEvery
	}
	var last *bool
	for {
		f, err := source.CheckFailover(ctx, src, r.cfg.Source.Slot)
		if err == nil {
			r.failover.Store(&f)
			if last == nil || *last != f.Possible {
				if f.Possible {
					r.log.Info("failover possible: a promoted standby keeps the replication slot", "slotsync_workers", f.SlotSyncWorkers)
				} else {
					r.log.Warn("failover not possible: after a promotion the slot is gone and every table is copied again", "why", strings.Join(f.Why, "; "))
				}
				last = &f.Possible
			}
		} else if ctx.Err() == nil {
			r.log.Warn("checking failover", "error", err)
		}
		if !natsx.Sleep(ctx, every) {
			return
		}
	}
}

// noteSlotLost records why the slot was gone after its backfill finished,
// from the last failover check made before it (the status shows it).
func (r *Reader) noteSlotLost(slot string) string {
	f := r.failoverPrev
	if f == nil {
		f = r.failover.Load()
	}
	why := "replication slot " + slot + " was gone after its backfill finished (dropped, or lost on a failover)"
	if f != nil && !f.Possible {
		why += "; the last failover check before it said: " + strings.Join(f.Why, "; ")
	} else if f == nil {
		why += "; no failover check had run"
	} else {
		why += "; the last failover check before it found failover possible: was the slot dropped, or the standby promoted before it was synchronized?"
	}
	r.slotLost.Store(&slotLostNote{At: time.Now().UTC(), Why: why})
	return why
}

// slotLostNote is the last slot_lost repair, for the status.
type slotLostNote struct {
	At  time.Time `json:"at"`
	Why string    `json:"why"`
}
