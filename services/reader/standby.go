package reader

// Decoding from a hot standby (Postgres 16+, docs/adr/0045-standby-decoding.md).
// source.dsn reaches the standby: the slot lives there, the replication
// connection and every read (catalog, backfill, resync chunks, TOAST
// fetches) go there. source.primary_dsn reaches its primary, where the
// reader writes: the publication (a catalog object, replicated to the
// standby), the resync watermarks (pg_logical_emit_message: a standby
// writes no WAL), and the state tables when state.dsn is empty
// (config.StateDSN). A watermark is written on the primary and reaches the
// standby later: a chunk is read only once the standby has replayed its low
// watermark (waitReplayed), so it sees every commit the stream delivers
// before that watermark.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/natsx"
)

// StandbyStatus is what the status shows of a standby source.
type StandbyStatus struct {
	// Primary is the host (and port) of source.primary_dsn, where the
	// reader writes; never its credentials.
	Primary string `json:"primary"`
	source.Replay
	CheckedAt time.Time `json:"checked_at"`
	Error     string    `json:"error,omitempty"`
}

// openPrimary opens the pool on source.primary_dsn (nil when unset), with
// the same session settings as the source's.
func (r *Reader) openPrimary(ctx context.Context) (*pgxpool.Pool, error) {
	if r.cfg.Source.PrimaryDSN == "" {
		return nil, nil
	}
	p, err := pgxpool.New(ctx, withParams(r.cfg.Source.PrimaryDSN))
	if err != nil {
		return nil, fmt.Errorf("connecting to the primary (source.primary_dsn, %s): %w", hostOf(r.cfg.Source.PrimaryDSN), err)
	}
	return p, nil
}

// querier is p as a source.Querier: nil for a nil pool (a typed nil
// would not compare equal to nil).
func querier(p *pgxpool.Pool) source.Querier {
	if p == nil {
		return nil
	}
	return p
}

// writer is the pool the reader writes to: the primary's when source.dsn
// reaches a standby (or primary_dsn is set), else the source's own.
func (r *Reader) writer(src *pgxpool.Pool) *pgxpool.Pool {
	if r.pri != nil {
		return r.pri
	}
	return src
}

// hostOf is a DSN's host and port, without user, password or parameters.
func hostOf(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		return "(unparsable DSN)"
	}
	return u.Host
}

// waitReplayed returns once the standby src has replayed the WAL up to at
// (pg_last_wal_replay_lsn() >= at): a snapshot taken after it sees every
// commit whose record ends at or before at. On a primary it returns at
// once. It logs once when the wait is long.
func (r *Reader) waitReplayed(ctx context.Context, src *pgxpool.Pool, at proto.LSN) error {
	if !r.standby {
		return nil
	}
	started := time.Now()
	warned := false
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var s string
		if err := src.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn()::text`).Scan(&s); err != nil {
			return fmt.Errorf("reading the standby's replay position: %w", err)
		}
		replayed, err := proto.ParseLSN(s)
		if err != nil {
			return fmt.Errorf("reading the standby's replay position: %w", err)
		}
		if replayed >= at {
			return nil
		}
		if !warned && time.Since(started) > 10*time.Second {
			warned = true
			r.log.Warn("waiting for the standby to replay the primary's WAL (replay lag)", "replayed", replayed.String(), "want", at.String())
		}
		if !natsx.Sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// primaryPosition is the primary's current WAL position.
func (r *Reader) primaryPosition(ctx context.Context) (proto.LSN, error) {
	var s string
	if err := r.pri.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, fmt.Errorf("reading the primary's WAL position: %w", err)
	}
	return proto.ParseLSN(s)
}

// catchUp waits until the standby has replayed what the primary has
// written so far (after the reader wrote there: a publication it made is
// then in the standby's catalog).
func (r *Reader) catchUp(ctx context.Context, src *pgxpool.Pool) error {
	if !r.standby {
		return nil
	}
	at, err := r.primaryPosition(ctx)
	if err != nil {
		return err
	}
	return r.waitReplayed(ctx, src, at)
}

// logStandbySnapshots makes the primary log its running transactions
// (pg_log_standby_snapshot()) every half second until ctx ends: a logical
// slot created on a standby waits for such a record to reach a consistent
// point, and an idle primary writes one only every 15 s, and only after
// activity. A role that may not run it is told once, and the slot creation
// then waits for the primary's own.
func (r *Reader) logStandbySnapshots(ctx context.Context) {
	if !r.standby {
		return
	}
	for {
		if _, err := r.pri.Exec(ctx, `SELECT pg_catalog.pg_log_standby_snapshot()`); err != nil {
			if ctx.Err() == nil {
				r.log.Warn("pg_log_standby_snapshot() on the primary failed: creating the slot on the standby waits for the primary to log its running transactions by itself (up to 15 s after activity); GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() to sluice's role avoids the wait", "error", err)
			}
			return
		}
		if !natsx.Sleep(ctx, 500*time.Millisecond) {
			return
		}
	}
}

// pollStandby reads the standby's replay position and lag behind the
// primary every poll (10 s), for the status. A standby promoted meanwhile
// ends the capture (ErrPromoted): the next start's CheckRole refuses the
// pair and says what to set.
func (r *Reader) pollStandby(ctx context.Context, src *pgxpool.Pool) error {
	every := 10 * time.Second
	if r.pollEvery > 0 {
		every = r.pollEvery
	}
	for {
		st := StandbyStatus{Primary: hostOf(r.cfg.Source.PrimaryDSN), CheckedAt: time.Now().UTC()}
		rp, err := source.ReadReplay(ctx, src, r.pri)
		if errors.Is(err, source.ErrPromoted) {
			r.log.Error("the standby the reader decodes from was promoted: stopping capture (watermarks written to source.primary_dsn no longer reach it)")
			return fmt.Errorf("decoding from a standby: %w", err)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			st.Error = strings.TrimSpace(err.Error())
		}
		st.Replay = rp
		r.replay.Store(&st)
		if !natsx.Sleep(ctx, every) {
			return nil
		}
	}
}
