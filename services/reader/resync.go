package reader

// The worker half of a live resync (capture/resync.go has the stream's
// half and the algorithm): the active reader polls the resync queue
// (state.Resyncs), and for each request copies the table in primary-key
// chunks of source.resync_chunk_rows, each one bracketed by a low and a high
// watermark in the WAL, waits for the stream to publish it, and persists the
// chunk's last key; then it writes the end mark, where the stream clears the
// scope's rows older than the first chunk's low watermark that the resync did
// not re-copy. A reader killed mid-resync continues from the last key
// persisted (its new watermarks carry new tokens; the lost attempt's marks,
// replayed, match nothing).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
	"github.com/sluice-cdc/sluice/services/reader/internal/capture"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/state"
)

// errResyncFailed marks a resync that cannot go on (the request fails).
var errResyncFailed = errors.New("resync failed")

// resyncLoop runs queued resyncs one at a time for as long as ctx lives
// (the reader holds its lease and streams).
func (r *Reader) resyncLoop(ctx context.Context, src, statePool *pgxpool.Pool, tables map[string]source.Table, opts *capture.Options) {
	q := state.NewResyncs(statePool, r.cfg.State.Schema)
	every := time.Second
	if r.resyncPoll > 0 {
		every = r.resyncPoll
	}
	attempt := 0
	for ctx.Err() == nil {
		req, ok, err := q.Next(ctx, r.cfg.Source.Slot)
		if err == nil && ok {
			err = r.runResync(ctx, q, src, tables, opts, req)
			if errors.Is(err, errResyncFailed) {
				r.log.Error("resync failed", "id", req.ID, "table", req.Table, "error", err)
				if ferr := q.Finish(ctx, req.ID, "", err); ferr != nil && ctx.Err() == nil {
					r.log.Warn("recording a failed resync", "id", req.ID, "error", ferr)
				}
				failed := req
				failed.State, failed.Error = state.ResyncFailed, err.Error()
				r.holds.note(failed)
				err = nil
			}
		}
		if err != nil && ctx.Err() == nil {
			attempt++
			d := natsx.Backoff(attempt)
			r.log.Warn("resync: retrying", "error", err, "retry_in", d.String())
			if !natsx.Sleep(ctx, d) {
				return
			}
			continue
		}
		attempt = 0
		if !ok && !natsx.Sleep(ctx, every) {
			return
		}
	}
}

// runResync runs one request to its end. An error wrapping errResyncFailed
// fails the request; any other leaves it running (retried).
func (r *Reader) runResync(ctx context.Context, q *state.Resyncs, src *pgxpool.Pool, tables map[string]source.Table, opts *capture.Options, req state.Resync) error {
	t, ok := tables[req.Table]
	if !ok {
		return fmt.Errorf("%w: %s is not in source.tables", errResyncFailed, req.Table)
	}
	m := r.metrics
	m.ResyncsRunning.WithLabelValues(t.Name).Set(1)
	defer m.ResyncsRunning.WithLabelValues(t.Name).Set(0)
	halted := r.state.Halted(t.Name) != ""
	if halted && req.Value != nil {
		// The halt dropped the changes of every destination.
		return fmt.Errorf("%w: %s is halted (%s): resync the whole table (sluice resync --table %s)", errResyncFailed, t.Name, r.state.Halted(t.Name), t.Name)
	}
	if halted {
		// What halted it must be fixed first: the table as the source has
		// it now passes the checks of a start (the message says what to run).
		now, err := source.Describe(ctx, src, t.Name, t.Routing)
		if err != nil {
			return fmt.Errorf("%w: %s is halted (%s) and cannot stream again: %w", errResyncFailed, t.Name, r.state.Halted(t.Name), err)
		}
		if now.OID != t.OID {
			return fmt.Errorf("%w: %s is another table than the one captured (relation %d, was %d): restart the reader to capture it, then resync it", errResyncFailed, t.Name, now.OID, t.OID)
		}
		if err := r.checkPublicationFixed(ctx, src, t.Name); err != nil {
			return fmt.Errorf("%w: %s is halted and cannot stream again: %w", errResyncFailed, t.Name, err)
		}
	}
	if halted || req.Halted {
		// The halt dropped the table's changes: the stream carries them
		// again from the first chunk's LW on, in one session. A resync
		// continued in another session starts over.
		if req.Chunks > 0 {
			r.log.Warn("resync of a halted table continued by a new session: starting over from its first chunk", "id", req.ID, "table", t.Name)
			if err := q.Reset(ctx, req.ID); err != nil {
				return err
			}
			req.LastKey, req.BoundLSN, req.Chunks, req.Rows = nil, "", 0, 0
		}
	}
	est, err := estimateRows(ctx, src, t, req.Value)
	if err != nil {
		return err
	}
	if err := q.Start(ctx, req.ID, halted, est); err != nil {
		return err
	}
	r.log.Info("resync started", "id", req.ID, "table", t.Name, "destination", req.Destination, "estimated_rows", est,
		"continued_from_chunk", req.Chunks, "halted", halted)
	conn, err := pgx.Connect(ctx, r.dsnWithParams())
	if err != nil {
		return fmt.Errorf("connecting for the resync of %s: %w", t.Name, err)
	}
	defer conn.Close(context.Background())

	chunkRows := r.cfg.Source.ResyncChunkRows
	lastKey, bound := req.LastKey, req.BoundLSN
	first := req.Chunks == 0
	var firstGen int64
	rows, chunks := req.Rows, req.Chunks
	started := time.Now()
	for {
		gen := r.resync.Generation()
		res, last, read, err := r.copyChunk(ctx, conn, src, t, req.Value, lastKey, first, chunkRows, opts)
		if err != nil {
			return err
		}
		if res.Err != nil {
			switch {
			case errors.Is(res.Err, capture.ErrChunkLost), errors.Is(res.Err, capture.ErrChunkRetry):
				reason := "lost"
				if errors.Is(res.Err, capture.ErrChunkRetry) {
					reason = "unsafe"
				}
				m.ResyncRetries.WithLabelValues(t.Name, reason).Inc()
				r.log.Info("resync chunk copied again", "id", req.ID, "table", t.Name, "reason", res.Err)
				if (halted || req.Halted) && !first && errors.Is(res.Err, capture.ErrChunkLost) {
					// A new session halted the table again at its start.
					if err := q.Reset(ctx, req.ID); err != nil {
						return err
					}
					lastKey, bound, first, rows, chunks = nil, "", true, 0, 0
				}
				if !natsx.Sleep(ctx, 50*time.Millisecond) {
					return ctx.Err()
				}
				continue
			default:
				return fmt.Errorf("%w: %w", errResyncFailed, res.Err)
			}
		}
		if first {
			bound, firstGen = res.LW.String(), gen
			if res.Unhalted && !halted && !req.Halted {
				// The table halted after the resync started and before its
				// first LW: the stream carries it again from that LW, so
				// this resync recovers the halt (cleared at its end).
				r.log.Info("resync: the table halted before the resync's first chunk; the resync recovers it", "id", req.ID, "table", t.Name)
				halted = true
			}
		}
		if err := q.Chunk(ctx, req.ID, last, bound, int64(res.Published), int64(res.Dropped)); err != nil {
			return err
		}
		m.ResyncChunks.WithLabelValues(t.Name).Inc()
		m.ResyncDropped.WithLabelValues(t.Name).Add(float64(res.Dropped))
		rows += int64(res.Published)
		chunks++
		p := capture.NewProgress(rows, est, started, false)
		r.state.SetResync(t.Name, capture.ResyncProgress{ID: req.ID, Progress: p, Chunks: chunks})
		if r.afterChunk != nil {
			r.afterChunk(req.ID, chunks)
		}
		first = false
		if last != nil {
			lastKey = last
		}
		if read < chunkRows {
			break
		}
	}
	boundLSN, err := proto.ParseLSN(bound)
	if err != nil {
		return fmt.Errorf("%w: bound %q: %w", errResyncFailed, bound, err)
	}
	end, err := r.endResync(ctx, src, t, req.Value, boundLSN)
	if err != nil {
		return err
	}
	if halted || req.Halted {
		cleared := r.resync.ClearHalt(firstGen, func() { r.state.ClearHalted(t.Name, end) })
		if !cleared {
			// A session started after the first chunk and dropped the
			// table's changes again: start over.
			if err := q.Reset(ctx, req.ID); err != nil {
				return err
			}
			return errors.New("the replication session restarted during the resync of a halted table: starting over")
		}
		var rec *capture.Recovered
		if rh, ok := r.state.Snapshot().Recovered[t.Name]; ok {
			rec = &rh
		}
		if err := clearHalt(ctx, r.deps.State, r.cfg.State.Schema, r.cfg.Source.Slot, t.Name, rec); err != nil {
			return err
		}
		for _, reason := range haltReasons {
			m.Halted.DeleteLabelValues(t.Name, reason)
		}
		r.log.Info("resync completed: the table's halt is cleared", "table", t.Name)
	}
	if err := q.Finish(ctx, req.ID, end.String(), nil); err != nil {
		return err
	}
	done := req
	done.State, done.EndLSN = state.ResyncDone, end.String()
	r.holds.note(done)
	r.state.SetResync(t.Name, capture.ResyncProgress{ID: req.ID, Progress: capture.NewProgress(rows, est, started, true), Chunks: chunks})
	r.log.Info("resync done", "id", req.ID, "table", t.Name, "rows", rows, "chunks", chunks, "end_lsn", end.String(),
		"seconds", time.Since(started).Seconds())
	return nil
}

// haltReasons are the reason labels of sluice_reader_table_halted.
var haltReasons = []string{"persisted", ReasonPublication, "truncate", "type_changed", "renamed", "recreated", "replica_identity", "generated",
	"bad_value", "too_large", "schema", "reserved_column", "dropped"}

// estimateRows is the table's pg_class.reltuples (0 when never analyzed),
// or the count of one routing value's rows.
func estimateRows(ctx context.Context, src *pgxpool.Pool, t source.Table, value *string) (int64, error) {
	var n int64
	if value != nil {
		schema, rel, _ := strings.Cut(t.Name, ".")
		q := `SELECT count(*) FROM ` + pgx.Identifier{schema, rel}.Sanitize() + ` WHERE ` + pgx.Identifier{t.Routing}.Sanitize() + `::text = $1`
		if err := src.QueryRow(ctx, q, *value).Scan(&n); err != nil {
			return 0, fmt.Errorf("counting the rows of %s to resync: %w", t.Name, err)
		}
		return n, nil
	}
	if err := src.QueryRow(ctx, `SELECT greatest(reltuples, 0)::int8 FROM pg_catalog.pg_class WHERE oid = $1::oid`, int64(t.OID)).Scan(&n); err != nil {
		return 0, fmt.Errorf("estimating the rows of %s: %w", t.Name, err)
	}
	return n, nil
}

// emitMark writes a resync mark into the WAL, outside any transaction, on
// the server the reader writes to (the primary, when the source is a
// standby: writer). It returns the end of the mark's record.
func (r *Reader) emitMark(ctx context.Context, src *pgxpool.Pool, token, kind string) (proto.LSN, error) {
	b, err := json.Marshal(capture.Mark{Slot: r.cfg.Source.Slot, Token: token, Kind: kind})
	if err != nil {
		return 0, err
	}
	q := `SELECT pg_logical_emit_message(false, $1, $2::text)::text`
	if r.flushMarks {
		q = `SELECT pg_logical_emit_message(false, $1, $2::text, true)::text`
	}
	var at string
	if err := r.writer(src).QueryRow(ctx, q, capture.ResyncPrefix, string(b)).Scan(&at); err != nil {
		return 0, fmt.Errorf("writing the resync's %s mark: %w", kind, err)
	}
	return proto.ParseLSN(at)
}

// copyChunk copies one chunk: the LW, the rows after lastKey in key order
// (at most n, of value's rows only for a per-destination resync) read in
// one snapshot, the HW; and waits for the stream's result. read is the
// number of rows the SELECT returned, last the key of the last one.
func (r *Reader) copyChunk(ctx context.Context, conn *pgx.Conn, src *pgxpool.Pool, t source.Table, value *string, lastKey []string, first bool, n int, opts *capture.Options) (res capture.ChunkResult, last []string, read int, err error) {
	c := r.resync.Register(&capture.Chunk{Token: uuid.NewString(), Table: t.Name, First: first})
	defer r.resync.Forget(c)
	lw, err := r.emitMark(ctx, src, c.Token, capture.MarkLow)
	if err != nil {
		return res, nil, 0, err
	}
	// A standby: the LW was written on the primary, and the chunk's
	// snapshot must be taken once the standby has replayed it, or it could
	// miss a commit the stream delivers before the LW (INVARIANTS rule
	// 23; docs/adr/0045-standby-decoding.md).
	if r.standby && !r.rules.noReplayWait {
		started := time.Now()
		if err := r.waitReplayed(ctx, src, lw); err != nil {
			return res, nil, 0, err
		}
		r.metrics.ReplayWait.Observe(time.Since(started).Seconds())
	}
	sc, rows, snap, err := selectChunk(ctx, conn, t, value, lastKey, n, opts)
	if err != nil {
		return res, nil, 0, err
	}
	read = len(rows)
	if read > 0 {
		vals := rows[read-1]
		for _, i := range sc.KeyIdx {
			last = append(last, string(vals[i]))
		}
	}
	if r.beforeHighWatermark != nil {
		r.beforeHighWatermark(t.Name, rows)
	}
	c.SetRows(sc, rows, snap)
	if _, err := r.emitMark(ctx, src, c.Token, capture.MarkHigh); err != nil {
		return res, nil, 0, err
	}
	select {
	case res = <-c.Done():
		r.lastSchema = c.Schema()
		return res, last, read, nil
	case <-ctx.Done():
		return res, nil, 0, ctx.Err()
	}
}

// selectChunk reads a chunk in a repeatable-read transaction: its
// snapshot, the table's schema as that snapshot sees it, and the rows
// (text forms in schema column order).
func selectChunk(ctx context.Context, conn *pgx.Conn, t source.Table, value *string, lastKey []string, n int, opts *capture.Options) (*batch.Schema, [][][]byte, string, error) {
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return nil, nil, "", fmt.Errorf("beginning a resync chunk of %s: %w", t.Name, err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK") }()
	var snap string
	if err := conn.QueryRow(ctx, "SELECT pg_current_snapshot()::text").Scan(&snap); err != nil {
		return nil, nil, "", fmt.Errorf("reading the snapshot of a resync chunk of %s: %w", t.Name, err)
	}
	sc, err := capture.DescribeSchema(ctx, conn, t, opts)
	if err != nil {
		return nil, nil, "", err
	}
	schema, rel, _ := strings.Cut(t.Name, ".")
	cols := make([]string, len(sc.Columns))
	for i, c := range sc.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	keys := make([]string, len(sc.KeyIdx))
	for i, k := range sc.KeyIdx {
		keys[i] = pgx.Identifier{sc.Columns[k].Name}.Sanitize()
	}
	var where []string
	var args []any
	if value != nil {
		args = append(args, *value)
		ri := slices.IndexFunc(sc.Columns, func(c batch.Column) bool { return c.Name == t.Routing })
		if ri < 0 {
			return nil, nil, "", fmt.Errorf("%w: %s has no routing column %s", errResyncFailed, t.Name, t.Routing)
		}
		where = append(where, fmt.Sprintf("%s = $1::text::%s", pgx.Identifier{t.Routing}.Sanitize(), sc.Columns[ri].PgType))
	}
	if lastKey != nil {
		if len(lastKey) != len(keys) {
			return nil, nil, "", fmt.Errorf("%w: the persisted key %v does not match %s's key %v", errResyncFailed, lastKey, t.Name, keys)
		}
		ph := make([]string, len(keys))
		for i, k := range sc.KeyIdx {
			args = append(args, lastKey[i])
			ph[i] = fmt.Sprintf("$%d::text::%s", len(args), sc.Columns[k].PgType)
		}
		where = append(where, "("+strings.Join(keys, ", ")+") > ("+strings.Join(ph, ", ")+")")
	}
	q := "SELECT " + strings.Join(cols, ", ") + " FROM " + pgx.Identifier{schema, rel}.Sanitize()
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += fmt.Sprintf(" ORDER BY %s LIMIT %d", strings.Join(keys, ", "), n)
	strArgs := make([]string, len(args))
	for i, a := range args {
		strArgs[i] = a.(string)
	}
	rr := conn.PgConn().ExecParams(ctx, q, textParams(strArgs), nil, nil, nil)
	var out [][][]byte
	for rr.NextRow() {
		vals := rr.Values()
		row := make([][]byte, len(vals))
		for i, v := range vals {
			if v != nil {
				row[i] = slices.Clone(v)
			}
		}
		out = append(out, row)
	}
	if _, err := rr.Close(); err != nil {
		return nil, nil, "", fmt.Errorf("copying a resync chunk of %s: %w", t.Name, err)
	}
	return sc, out, snap, nil
}

func textParams(args []string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// endResync writes the end mark and waits until the stream has emitted the
// clear after it; it returns the end mark's position.
func (r *Reader) endResync(ctx context.Context, src *pgxpool.Pool, t source.Table, value *string, bound proto.LSN) (proto.LSN, error) {
	for {
		c := r.resync.Register(&capture.Chunk{Token: uuid.NewString(), Table: t.Name, End: true, Value: value, Bound: proto.Position{LSN: bound}})
		c.SetRows(r.lastSchema, nil, "")
		if _, err := r.emitMark(ctx, src, c.Token, capture.MarkEnd); err != nil {
			r.resync.Forget(c)
			return 0, err
		}
		var res capture.ChunkResult
		select {
		case res = <-c.Done():
		case <-ctx.Done():
			r.resync.Forget(c)
			return 0, ctx.Err()
		}
		r.resync.Forget(c)
		switch {
		case res.Err == nil:
			return res.HW, nil
		case errors.Is(res.Err, capture.ErrChunkLost):
			if !natsx.Sleep(ctx, 50*time.Millisecond) {
				return 0, ctx.Err()
			}
		default:
			return 0, fmt.Errorf("%w: %w", errResyncFailed, res.Err)
		}
	}
}
