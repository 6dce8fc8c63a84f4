package source

// Decoding from a hot standby (Postgres 16+, docs/adr/0045-standby-decoding.md):
// source.dsn may reach a standby when source.primary_dsn names its primary,
// where sluice writes what it must (the publication, resync watermarks, its
// state when kept in the source). CheckRole says which of the two
// source.dsn reaches and refuses every combination that cannot work.

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// StandbyVersion is the first Postgres major that decodes on a standby
// (logical slots on a server in recovery).
const StandbyVersion = 16

// refusedStandby is the refusal of a standby source.dsn without
// source.primary_dsn (before 0045 the only one: its first sentence is kept).
const refusedStandby = "source.dsn connects to a standby (pg_is_in_recovery() is true); sluice captures from the primary: point source.dsn at it, or, naming several hosts, add target_session_attrs=read-write (postgres://app@pg-a,pg-b/app?target_session_attrs=read-write) so the one that accepts writes is chosen"

// CheckRole reads whether src (the server source.dsn reaches, of version
// ver) is a standby and checks it against pri, the server source.primary_dsn
// reaches (nil when unset):
//   - a primary without pri: the reader writes to it (standby false);
//   - a primary with pri: pri must be that same server (a primary with the
//     same system identifier); the reader writes to pri;
//   - a standby: pri must be set, the server must be Postgres 16 or newer,
//     pri must be a primary of the same cluster (system identifier) with
//     wal_level = logical, and the standby must run hot_standby_feedback =
//     on (without it the primary's vacuum removes catalog rows the slot
//     still needs and Postgres invalidates the slot: rows_removed).
func CheckRole(ctx context.Context, src Querier, ver ServerVersion, pri Querier) (standby bool, err error) {
	if err := src.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
		return false, fmt.Errorf("checking whether the source is a standby: %w", err)
	}
	if !standby && pri == nil {
		return false, nil
	}
	if standby && pri == nil {
		return true, invalid("%s; or, to decode from this standby (Postgres %d or newer), set source.primary_dsn (SLUICE_SOURCE_PRIMARY_DSN) to its primary, where sluice writes", refusedStandby, StandbyVersion)
	}
	if standby && ver.Major() < StandbyVersion {
		return true, invalid("source.dsn connects to a standby of Postgres %s; decoding from a standby needs Postgres %d or newer (logical slots on a standby): point source.dsn at the primary and leave source.primary_dsn unset, or upgrade", ver.Text, StandbyVersion)
	}
	var priStandby bool
	if err := pri.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&priStandby); err != nil {
		return standby, fmt.Errorf("checking whether source.primary_dsn reaches a primary: %w", err)
	}
	if priStandby {
		return standby, invalid("source.primary_dsn connects to a standby (pg_is_in_recovery() is true): point it at the primary, which accepts the writes sluice makes (publication, resync watermarks, state)")
	}
	a, b, known, err := onBoth(ctx, src, pri, systemID)
	if err != nil {
		return standby, err
	}
	if known && a != b {
		if standby {
			return standby, invalid("source.primary_dsn reaches another cluster than source.dsn (system identifier %s, the standby's is %s): point it at the primary the standby replicates from", b, a)
		}
		return standby, invalid("source.dsn connects to a primary and source.primary_dsn to another server (system identifier %s, source.dsn's is %s): leave source.primary_dsn unset, or point it at the same server", b, a)
	}
	if !standby {
		// The same cluster, and the same server: a standby promoted while
		// primary_dsn still names its old primary is on a later timeline.
		ta, tb, known, err := onBoth(ctx, src, pri, timeline)
		if err != nil {
			return false, err
		}
		if known && ta != tb {
			return false, invalid("source.dsn connects to a primary on timeline %d and source.primary_dsn to another server of its cluster on timeline %d (a standby promoted while source.primary_dsn still names its old primary?): point source.primary_dsn at the server source.dsn reaches, or leave it unset, and state.dsn at the server that holds sluice's state", ta, tb)
		}
		return false, nil
	}
	var feedback string
	if err := src.QueryRow(ctx, `SHOW hot_standby_feedback`).Scan(&feedback); err != nil {
		return standby, fmt.Errorf("reading the standby's hot_standby_feedback: %w", err)
	}
	if feedback != "on" {
		return standby, invalid("the standby source.dsn reaches runs hot_standby_feedback = %s: the primary's vacuum would remove catalog rows sluice's slot needs and Postgres would invalidate the slot (rows_removed), so every table would be copied again; on the standby run ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf(); (a physical slot, primary_slot_name, keeps the feedback across reconnects)", feedback)
	}
	if err := CheckWALLevel(ctx, pri); err != nil {
		return standby, fmt.Errorf("the primary source.primary_dsn reaches: %w", err)
	}
	return true, nil
}

// onBoth reads one value on a and on b; known is false when either could
// not tell.
func onBoth[T any](ctx context.Context, a, b Querier, read func(context.Context, Querier) (T, bool, error)) (va, vb T, known bool, err error) {
	va, aok, err := read(ctx, a)
	if err != nil {
		return va, vb, false, err
	}
	vb, bok, err := read(ctx, b)
	if err != nil {
		return va, vb, false, err
	}
	return va, vb, aok && bok, nil
}

// systemID is the cluster's system identifier (pg_control_system()); ok is
// false where the role may not read it (the check is then skipped).
func systemID(ctx context.Context, q Querier) (id string, ok bool, err error) {
	err = q.QueryRow(ctx, `SELECT system_identifier::text FROM pg_catalog.pg_control_system()`).Scan(&id)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading the system identifier: %w", err)
	}
	return id, true, nil
}

// timeline is a primary's current timeline, read from the name of the
// WAL file it writes (pg_walfile_name: its first 8 hex digits); a promoted
// standby writes on a new one from its promotion on. ok is false when it
// cannot be read.
func timeline(ctx context.Context, q Querier) (tli int64, ok bool, err error) {
	var name string
	if err := q.QueryRow(ctx, `SELECT pg_walfile_name(pg_current_wal_lsn())`).Scan(&name); err != nil {
		return 0, false, fmt.Errorf("reading the timeline: %w", err)
	}
	if len(name) < 8 {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(name[:8], 16, 64)
	if err != nil {
		return 0, false, nil
	}
	return v, true, nil
}

// Replay is what a standby says of its replay (the status shows it).
type Replay struct {
	// ReplayLSN is pg_last_wal_replay_lsn() on the standby.
	ReplayLSN string `json:"replay_lsn"`
	// LagBytes is the primary's pg_current_wal_lsn() minus ReplayLSN (read
	// one after the other: an estimate).
	LagBytes int64 `json:"lag_bytes"`
	// LagSeconds is now() - pg_last_xact_replay_timestamp() on the standby:
	// the age of the last transaction replayed, which grows while the
	// primary is idle too; null before any.
	LagSeconds *float64 `json:"lag_seconds,omitempty"`
}

// ReadReplay reads the standby's replay position and its lag behind pri.
// A standby that is no longer in recovery (promoted) is ErrPromoted.
func ReadReplay(ctx context.Context, standby, pri Querier) (Replay, error) {
	var r Replay
	var recovering bool
	if err := standby.QueryRow(ctx, `SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text, extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8`).Scan(&recovering, &r.ReplayLSN, &r.LagSeconds); err != nil {
		return r, fmt.Errorf("reading the standby's replay position: %w", err)
	}
	if !recovering {
		return r, ErrPromoted
	}
	if err := pri.QueryRow(ctx, `SELECT greatest(pg_current_wal_lsn() - $1::text::pg_lsn, 0)::int8`, r.ReplayLSN).Scan(&r.LagBytes); err != nil {
		return r, fmt.Errorf("reading the primary's WAL position: %w", err)
	}
	return r, nil
}
