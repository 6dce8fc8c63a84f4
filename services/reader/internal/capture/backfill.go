package capture

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
	"github.com/sluice-cdc/sluice/services/reader/internal/confirm"
	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
)

// Snapshot is an exported snapshot of a freshly created slot.
type Snapshot struct {
	Name            string
	ConsistentPoint proto.LSN
	Time            time.Time
}

// LSN is the commit LSN the copied rows take: one byte below the
// consistent point. A transaction is in the snapshot when its commit record
// starts before the consistent point, and it is streamed when its commit
// record starts at or after it (positions carry the commit record's start),
// so the first transaction after the snapshot can sit exactly at the
// consistent point. At (consistent point, ordinal) a copied row would tie
// with it and win on ordinal, a stale value over a newer change; one byte
// below, every copied row is newer than each change the snapshot holds (a
// commit record is at least 24 bytes long, so none starts there) and older
// than each change it does not.
func (s Snapshot) LSN() proto.LSN { return s.ConsistentPoint - 1 }

// Backfill copies every table's rows as of snap and publishes them as
// OpInsert at (snap.LSN(), copy ordinal), tables in parallel on
// workers connections to dsn. It returns once every batch is acked.
// meta resolves column types (it runs before the workers start).
func Backfill(ctx context.Context, dsn string, snap Snapshot, tables []source.Table, workers int, o *Options) error {
	o.State.SetPhase("backfilling")
	schemas := make([]*batch.Schema, len(tables))
	cols := make([][]string, len(tables))
	for i, t := range tables {
		sc, err := tableSchema(ctx, dsn, snap, t, o)
		if err != nil {
			return err
		}
		// A copy of the whole table: its kinds are all there is.
		o.Kinds.Forget(t.Name)
		if err := o.Kinds.Note(ctx, sc); err != nil {
			return err
		}
		schemas[i] = sc
		for _, c := range sc.Columns {
			cols[i] = append(cols[i], pgx.Identifier{c.Name}.Sanitize())
		}
	}
	pipe := NewPipeline(o.Publish, confirm.New(0), o.MaxInFlight, o.AckWait, func(out Out, d time.Duration) {
		o.Metrics.PublishSeconds.Observe(d.Seconds())
		o.Metrics.Messages.WithLabelValues("data").Inc()
		o.Metrics.Rows.WithLabelValues(out.Table).Add(float64(out.Rows))
		o.Metrics.Bytes.WithLabelValues(out.Table).Add(float64(len(out.Msg.Data)))
		o.State.addRows(out.Table, out.Rows)
	})
	g, gctx := errgroup.WithContext(ctx)
	outs := make(chan Out, max(o.MaxInFlight, 1))
	done := make([]atomic.Int64, len(tables))
	started := time.Now()

	g.Go(func() error { // the one publisher: pipeline order
		for {
			select {
			case <-gctx.Done():
				return nil
			case out, ok := <-outs:
				if !ok {
					// Wait for the acks while gctx is live: errgroup cancels
					// it when Wait returns, and a publish still awaiting its
					// ack would then fail the whole backfill.
					pipe.Wait()
					return pipe.Err()
				}
				for {
					ok, err := pipe.Acquire(gctx, time.Second)
					if err != nil {
						return err
					}
					if ok {
						break
					}
				}
				if err := pipe.Send(gctx, out); err != nil {
					return err
				}
			}
		}
	})
	var copiers sync.WaitGroup
	sem := make(chan struct{}, max(workers, 1))
	copiers.Add(len(tables))
	for i := range tables {
		g.Go(func() error {
			defer copiers.Done()
			select {
			case sem <- struct{}{}:
			case <-gctx.Done():
				return nil
			}
			defer func() { <-sem }()
			return copyTable(gctx, dsn, snap, tables[i], schemas[i], cols[i], o, outs, &done[i])
		})
	}
	g.Go(func() error { copiers.Wait(); close(outs); return nil })
	g.Go(func() error { // progress
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		finished := make(chan struct{})
		go func() { copiers.Wait(); close(finished) }()
		for {
			stop := false
			select {
			case <-gctx.Done():
				stop = true
			case <-finished:
				stop = true
			case <-t.C:
			}
			for i, tb := range tables {
				p := NewProgress(done[i].Load(), tb.EstRows, started, stop && gctx.Err() == nil)
				o.State.setProgress(tb.Name, p)
				if !stop {
					o.Log.Info("backfill progress", "table", tb.Name, "rows", p.Rows, "estimated_rows", p.Estimated, "rows_per_sec", int64(p.RowsPerSec), "eta", p.ETA.Round(time.Second).String())
				}
			}
			if stop {
				return nil
			}
		}
	})
	err := g.Wait()
	pipe.Wait()
	if err == nil {
		err = pipe.Err()
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("backfilling: %w", err)
	}
	var total int64
	for i := range done {
		total += done[i].Load()
	}
	o.Log.Info("backfill done", "rows", total, "tables", len(tables), "seconds", time.Since(started).Seconds(), "consistent_point", snap.ConsistentPoint.String())
	return nil
}

// NewProgress is the progress of a copy of est rows started at started
// that has copied rows.
func NewProgress(rows, est int64, started time.Time, done bool) Progress {
	p := Progress{Rows: rows, Estimated: est, Done: done}
	if el := time.Since(started).Seconds(); el > 0 {
		p.RowsPerSec = float64(rows) / el
	}
	if p.RowsPerSec > 0 && est > rows && !done {
		p.ETA = time.Duration(float64(est-rows) / p.RowsPerSec * float64(time.Second))
	}
	return p
}

func snapshotTx(ctx context.Context, conn *pgx.Conn, snap Snapshot) error {
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return fmt.Errorf("beginning snapshot transaction: %w", err)
	}
	if _, err := conn.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(snap.Name, "'", "")+"'"); err != nil {
		return fmt.Errorf("importing snapshot %s: %w", snap.Name, err)
	}
	return nil
}

// tableSchema builds the table's batch schema from its columns as of the
// snapshot, through the same resolver the stream uses, so both produce the
// same fingerprint.
func tableSchema(ctx context.Context, dsn string, snap Snapshot, t source.Table, o *Options) (*batch.Schema, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connecting for backfill of %s: %w", t.Name, err)
	}
	defer conn.Close(context.Background())
	if err := snapshotTx(ctx, conn, snap); err != nil {
		return nil, err
	}
	return DescribeSchema(ctx, conn, t, o)
}

// DescribeSchema builds the table's batch schema from its columns as the
// transaction open on conn sees them (the backfill's snapshot, a resync
// chunk's), through the resolver the stream uses.
func DescribeSchema(ctx context.Context, conn *pgx.Conn, t source.Table, o *Options) (*batch.Schema, error) {
	rows, err := conn.Query(ctx, `SELECT attname, atttypid::int8, atttypmod FROM pg_catalog.pg_attribute
		WHERE attrelid = $1::oid AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, t.OID)
	if err != nil {
		return nil, fmt.Errorf("listing columns of %s: %w", t.Name, err)
	}
	type col struct {
		name   string
		oid    int64
		typmod int32
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (col, error) {
		var c col
		err := r.Scan(&c.name, &c.oid, &c.typmod)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing columns of %s: %w", t.Name, err)
	}
	var out []batch.Column
	for _, c := range cs {
		kind, pgType, toJSON, err := o.Resolve(ctx, t.OID, pgoutput.Column{Name: c.name, TypeOID: uint32(c.oid), TypMod: c.typmod})
		if err != nil {
			return nil, fmt.Errorf("resolving %s.%s: %w", t.Name, c.name, err)
		}
		out = append(out, batch.Column{Name: c.name, Kind: kind, PgType: pgType, TypeOID: uint32(c.oid), TypMod: c.typmod, ToJSON: toJSON})
	}
	return batch.NewSchema(t.Name, out, t.Key, t.Routing)
}

func copyTable(ctx context.Context, dsn string, snap Snapshot, t source.Table, sc *batch.Schema, cols []string, o *Options, outs chan<- Out, done *atomic.Int64) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connecting for backfill of %s: %w", t.Name, err)
	}
	defer conn.Close(context.Background())
	if err := snapshotTx(ctx, conn, snap); err != nil {
		return err
	}
	schema, rel, _ := strings.Cut(t.Name, ".")
	sql := "SELECT " + strings.Join(cols, ", ") + " FROM " + pgx.Identifier{schema, rel}.Sanitize()
	b := batch.NewBuilder(o.Mem, sc, o.Append)
	defer b.Release()
	var cb *batch.Builder // sc.WithClaims(): a row that carries values by reference
	defer func() {
		if cb != nil {
			cb.Release()
		}
	}()
	flushB := func(b *batch.Builder, claimed int64) error {
		if b.Rows() == 0 {
			return nil
		}
		rows := b.Rows()
		rec := b.Cut()
		parts, err := encodeParts(rec, o.MaxPayload, o.Metrics)
		rec.Release()
		if errors.Is(err, ErrTooLarge) {
			return fmt.Errorf("backfilling %s: %w", t.Name, err)
		}
		if err != nil {
			return fmt.Errorf("encoding backfill batch of %s: %w", t.Name, err)
		}
		for _, p := range parts {
			if err := sendOut(ctx, o, outs, claimedOut(batchOut(t.Name, b.Schema.Fingerprint, p.first, p.last, 0, p.rows, p.body), claimed)); err != nil {
				return err
			}
		}
		done.Add(int64(rows))
		o.Metrics.BackfillRows.WithLabelValues(t.Name).Add(float64(rows))
		return nil
	}
	flush := func() error { return flushB(b, 0) }
	rr := conn.PgConn().Exec(ctx, sql)
	defer rr.Close()
	var ord uint64
	row := batch.Row{Op: proto.OpInsert, CommitTime: snap.Time}
	for rr.NextResult() {
		res := rr.ResultReader()
		for res.NextRow() {
			vals := res.Values()
			ord++
			row.Pos = proto.Position{LSN: snap.LSN(), Seq: ord}
			row.SetText(vals)
			if pickClaims(o, sc, &row) {
				// Values carried by reference: the row goes alone, after
				// the rows before it.
				claimed, err := writeClaims(ctx, o, sc, &row)
				if err != nil {
					return fmt.Errorf("backfilling %s: %w", t.Name, err)
				}
				if err := flush(); err != nil {
					return err
				}
				if cb == nil {
					cb = batch.NewBuilder(o.Mem, sc.WithClaims(), o.Append)
				}
				if err := cb.Append(&row); err != nil {
					return haltBackfill(ctx, t.Name, snap.LSN(), o, err)
				}
				if err := flushB(cb, claimed); err != nil {
					return err
				}
				continue
			}
			if err := b.Append(&row); err != nil {
				if !errors.Is(err, batch.ErrValue) {
					return fmt.Errorf("backfilling %s: %w", t.Name, err)
				}
				// A value sluice cannot carry: halt this table as the
				// stream would (persisted, so the stream skips it too);
				// the other tables' copies go on.
				return haltBackfill(ctx, t.Name, snap.LSN(), o, err)
			}
			if b.Rows() >= o.BatchRows || b.Bytes() >= o.BatchBytes {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if _, err := res.Close(); err != nil {
			return fmt.Errorf("copying %s: %w", t.Name, err)
		}
	}
	if err := rr.Close(); err != nil {
		return fmt.Errorf("copying %s: %w", t.Name, err)
	}
	if err := flush(); err != nil {
		return err
	}
	_, _ = conn.Exec(ctx, "COMMIT")
	if o.BackfillClear {
		// Below every copied row (their ordinals start at 1) and after
		// them in the stream: what the destinations held from before the
		// snapshot and the copy did not bring again is gone at the source.
		rec, err := clearRecord(o, sc, nil, proto.Position{LSN: snap.LSN(), Seq: 0}, snap.Time)
		if err != nil {
			return fmt.Errorf("building the clear of %s: %w", t.Name, err)
		}
		if err := sendOut(ctx, o, outs, clearOut(t.Name, sc, nil, proto.Position{LSN: snap.LSN(), Seq: 0}, 0, rec)); err != nil {
			return err
		}
		o.Metrics.Clears.Inc()
	}
	return nil
}

// haltBackfill halts table during its copy: recorded like a halt of the
// stream (the reason names the value), so `sluice status` shows it and the
// stream that follows never publishes the table's changes.
func haltBackfill(ctx context.Context, table string, at proto.LSN, o *Options, cause error) error {
	o.Log.Error("table halted during backfill: its rows are no longer published; fix the value or leave the table out, then resync it", "table", table, "reason", "bad_value", "error", cause)
	if err := o.Halt(ctx, table, cause.Error(), at); err != nil {
		return fmt.Errorf("recording halt of %s: %w", table, err)
	}
	o.Metrics.Halted.WithLabelValues(table, "bad_value").Set(1)
	o.State.SetHaltedAt(table, at)
	o.State.SetHalted(table, cause.Error())
	return nil
}

// sendOut hands out, with its publish span started, to the backfill's one
// publisher, or ends the span when ctx ends first.
func sendOut(ctx context.Context, o *Options, outs chan<- Out, out Out) error {
	out.Span = startSpan(o.Tracer, out)
	select {
	case outs <- out:
		return nil
	case <-ctx.Done():
		if out.Span != nil {
			out.Span.End()
		}
		return ctx.Err()
	}
}
