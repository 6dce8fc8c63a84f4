package reader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/capture"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/state"
)

// autoResync queues a resync of table that the reader decided on by itself
// (reason: capture.Reason*, or "slot_lost"), logs it and counts it. It
// shows in the queue (`sluice resync --list`, GET /api/v1/resyncs, status)
// with the reason "schema_change: <reason>" or "slot_lost".
func (r *Reader) autoResync(ctx context.Context, statePool *pgxpool.Pool, table, reason, detail string) error {
	label := "schema_change: " + reason
	if reason == ReasonSlotLost || reason == ReasonPublication {
		label = reason
	}
	req, err := state.NewResyncs(statePool, r.cfg.State.Schema).Enqueue(ctx, r.cfg.Source.Slot, table, "", nil, label)
	if err != nil {
		return err
	}
	r.holds.note(req)
	r.metrics.AutoResyncs.WithLabelValues(reason).Inc()
	r.log.Warn("the reader resyncs a table by itself", "table", table, "reason", reason, "detail", detail, "resync", req.ID)
	return nil
}

// errSlotLost ends the stream when the replication slot is gone: the
// reader creates it again and copies every table (prepareSlot).
var errSlotLost = errors.New("replication slot disappeared")

// autoResyncFunc is the stream's AutoResync (nil when the rule is off).
func (r *Reader) autoResyncFunc(statePool *pgxpool.Pool) capture.AutoResyncFunc {
	if r.rules.noAutoResync {
		return nil
	}
	return func(ctx context.Context, table, reason, detail string) error {
		return r.autoResync(ctx, statePool, table, reason, detail)
	}
}

// ReasonSlotLost is the auto-resync reason of a replication slot that was
// gone (dropped, or lost on failover) while its backfill was done.
const ReasonSlotLost = "slot_lost"

// backfillAdded handles tables added to the publication of an existing
// slot (source.tables grew; or, reason "publication", whose capture the
// start check repaired): the stream carries their changes from now on,
// and their existing rows need a copy. When the backfill finished, each is
// queued as a live resync (reason "added"), which copies it while every
// other table streams. When it did not, the backfill is marked due again
// and its redo in prepareSlot copies every table at a temporary slot's
// snapshot (the mark is persisted first, so a reader that dies before the
// copy ends copies every table again: more work, nothing missed). It
// returns nil: no table is copied alone at start.
func (r *Reader) backfillAdded(ctx context.Context, src, statePool *pgxpool.Pool, added []string, reason string) ([]string, error) {
	if len(added) == 0 || !r.cfg.Source.Backfill {
		return nil, nil
	}
	sl, err := source.LookupSlot(ctx, src, r.cfg.Source.Slot)
	if err != nil || !sl.Exists {
		return nil, err
	}
	bf, err := backfillState(ctx, statePool, r.cfg.State.Schema, r.cfg.Source.Slot)
	if err != nil {
		return nil, err
	}
	if bf == "done" {
		q := state.NewResyncs(statePool, r.cfg.State.Schema)
		for _, t := range added {
			req, err := q.Enqueue(ctx, r.cfg.Source.Slot, t, "", nil, reason)
			if err != nil {
				return nil, err
			}
			r.holds.note(req)
			r.log.Warn("table added to the publication: a resync copies its existing rows while the others stream", "table", t, "reason", reason, "resync", req.ID)
		}
		return nil, nil
	}
	r.log.Warn("tables added to the publication: copying their existing rows", "tables", added, "reason", reason)
	if err := setBackfill(ctx, statePool, r.cfg.State.Schema, r.cfg.Source.Slot, "running", 0); err != nil {
		return nil, err
	}
	return nil, nil
}

func (r *Reader) prepareSlot(ctx context.Context, src *pgxpool.Pool, statePool *pgxpool.Pool, tables []source.Table, copyOnly []string, opts *capture.Options) error {
	slot := r.cfg.Source.Slot
	sl, err := source.LookupSlot(ctx, src, slot)
	if err != nil {
		return err
	}
	bf, err := backfillState(ctx, statePool, r.cfg.State.Schema, slot)
	if err != nil {
		return err
	}
	redo := r.cfg.Source.Backfill && sl.Exists && bf == "running"
	if sl.Exists && !redo {
		return nil
	}
	// A slot gone after its backfill finished was dropped (or lost on a
	// failover): the WAL between its confirmed position and the new slot is
	// gone, so every table is copied again at the new slot's snapshot and
	// cleared below it; the last published snapshot stays readable
	// meanwhile, and no snapshot claims an LSN past the old frontier until
	// the copy and its clears are published (they carry no Sluice-Through).
	lost := !sl.Exists && bf == "done"
	if lost {
		why := r.noteSlotLost(slot)
		r.log.Warn("replication slot lost: creating it again and copying every table at its snapshot", "slot", slot, "reason", ReasonSlotLost, "why", why)
		r.metrics.AutoResyncs.WithLabelValues(ReasonSlotLost).Add(float64(len(tables)))
	}
	opts.BackfillClear = lost || redo
	if r.cfg.Source.Backfill {
		if err := setBackfill(ctx, statePool, r.cfg.State.Schema, slot, "running", 0); err != nil {
			return err
		}
	}
	conn, err := r.replicationConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	major, err := serverMajor(ctx, src)
	if err != nil {
		return err
	}
	name, temporary := slot, false
	if redo {
		// A previous backfill did not finish. The slot is kept: it streams
		// everything after its own consistent point, including the deletes
		// of rows the unfinished copy may already have published. The new
		// copy reads the exact snapshot of a temporary slot (dropped with
		// this connection) and takes its later consistent point as LSN, so
		// every change it reflects is older and every later one newer.
		name, temporary = slot+"_backfill", true
		if len(copyOnly) == 0 {
			r.log.Warn("a previous backfill did not finish: copying again", "snapshot_slot", name)
		}
	}
	// On a standby the slot waits for the primary's next record of its
	// running transactions: have the primary write them meanwhile.
	lctx, stopLogging := context.WithCancel(ctx)
	go r.logStandbySnapshots(lctx)
	res, err := r.createSlot(ctx, conn, major, name, temporary, r.cfg.Source.Backfill)
	stopLogging()
	if err != nil {
		return fmt.Errorf("creating replication slot %s: %w (needs the REPLICATION attribute: ALTER ROLE <user> REPLICATION;)", name, err)
	}
	cp, err := proto.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return err
	}
	r.log.Info("replication slot created", "name", name, "consistent_point", cp.String(), "backfill", r.cfg.Source.Backfill, "temporary", temporary,
		"failover", major >= source.FailoverVersion && !temporary && !r.rules.noSlotFailover && !r.standby, "on_standby", r.standby)
	if !r.cfg.Source.Backfill {
		return nil
	}
	snap := capture.Snapshot{Name: res.SnapshotName, ConsistentPoint: cp, Time: time.Now()}
	if redo && len(copyOnly) > 0 {
		tables = slices.DeleteFunc(slices.Clone(tables), func(t source.Table) bool { return !slices.Contains(copyOnly, t.Name) })
	}
	if err := capture.Backfill(ctx, r.dsnWithParams(), snap, tables, r.cfg.Reader.BackfillWorkers, opts); err != nil {
		return err
	}
	return setBackfill(ctx, statePool, r.cfg.State.Schema, slot, "done", cp)
}
