package source

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// FailoverVersion is the first Postgres major (server_version_num / 10000)
// whose logical slots can follow a promoted standby: a slot created or
// altered with FAILOVER true is synchronized to standbys that run
// sync_replication_slots = on.
const FailoverVersion = 17

// Failover is what the primary can tell about whether the slot survives the
// promotion of one of its standbys. The standby's own settings
// (sync_replication_slots, a dbname in primary_conninfo) are not visible
// from the primary: Unknown says so, and the standby itself shows the
// synchronized slot (SELECT synced FROM pg_replication_slots there).
type Failover struct {
	ServerVersion int  `json:"server_version"` // server_version_num
	InRecovery    bool `json:"in_recovery,omitempty"`
	// Possible: the slot has failover on and at least one standby streams
	// from a physical slot that synchronized_standby_slots names and keeps
	// hot_standby_feedback on, with a slot synchronization worker connected.
	Possible bool `json:"possible"`
	// Why says what is missing when not Possible (or, when Possible, what
	// only the standby can confirm).
	Why []string `json:"why,omitempty"`
	// SlotFailover is the slot's failover flag (Postgres 17+); Synced that
	// the slot itself was synchronized from a former primary.
	SlotFailover bool `json:"slot_failover"`
	Synced       bool `json:"synced,omitempty"`
	// SynchronizedStandbySlots is the primary's synchronized_standby_slots.
	SynchronizedStandbySlots []string `json:"synchronized_standby_slots,omitempty"`
	// SlotSyncWorkers counts the standbys' slot synchronization workers
	// connected to this primary: client backends named like a standby's
	// walreceiver (primary_conninfo's application_name) or "slotsync
	// worker". A client that takes a standby's name counts too.
	SlotSyncWorkers int       `json:"slotsync_workers"`
	Standbys        []Standby `json:"standbys,omitempty"`
	// Unknown is what the primary cannot see.
	Unknown string `json:"unknown,omitempty"`
}

// Standby is one physical replication slot, or one streaming standby
// without a slot, as the primary sees it.
type Standby struct {
	Slot        string `json:"slot,omitempty"`        // physical slot name ("" : streams without one)
	Active      bool   `json:"active"`                // a walsender streams from it
	Named       bool   `json:"named"`                 // listed in synchronized_standby_slots
	Feedback    bool   `json:"hot_standby_feedback"`  // the slot holds a catalog xmin or xmin
	Application string `json:"application,omitempty"` // pg_stat_replication.application_name
	State       string `json:"state,omitempty"`       // pg_stat_replication.state
	FlushLSN    string `json:"flush_lsn,omitempty"`
}

// CheckFailover reads what the server can tell about the failover of
// slot. Before Postgres 17 it reports Possible false with the reason.
func CheckFailover(ctx context.Context, q Querier, slot string) (Failover, error) {
	var f Failover
	if err := q.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, pg_is_in_recovery()`).Scan(&f.ServerVersion, &f.InRecovery); err != nil {
		return f, fmt.Errorf("reading the server version: %w", err)
	}
	if f.ServerVersion/10000 < FailoverVersion {
		f.Why = append(f.Why, fmt.Sprintf("Postgres %d does not synchronize logical slots to standbys (17+ does): after a promotion the slot is gone and every table is copied again (slot_lost)", f.ServerVersion/10000))
		return f, nil
	}
	err := q.QueryRow(ctx, `SELECT coalesce(bool_or(failover), false), coalesce(bool_or(synced), false), count(*) > 0
		FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, slot).Scan(&f.SlotFailover, &f.Synced, new(bool))
	if err != nil {
		return f, fmt.Errorf("reading the failover flag of slot %s: %w", slot, err)
	}
	var names string
	if err := q.QueryRow(ctx, `SELECT current_setting('synchronized_standby_slots')`).Scan(&names); err != nil {
		return f, fmt.Errorf("reading synchronized_standby_slots: %w", err)
	}
	for n := range strings.SplitSeq(names, ",") {
		if n = strings.Trim(strings.TrimSpace(n), `"`); n != "" {
			f.SynchronizedStandbySlots = append(f.SynchronizedStandbySlots, n)
		}
	}
	rows, err := q.Query(ctx, `SELECT coalesce(s.slot_name::text, ''), coalesce(s.active, r.pid IS NOT NULL),
			s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL,
			coalesce(r.application_name, ''), coalesce(r.state, ''), coalesce(r.flush_lsn::text, '')
		FROM (SELECT * FROM pg_catalog.pg_replication_slots WHERE slot_type = 'physical') s
		FULL JOIN (SELECT * FROM pg_catalog.pg_stat_replication WHERE application_name <> 'sluice-reader' AND pid NOT IN
			(SELECT active_pid FROM pg_catalog.pg_replication_slots WHERE slot_type = 'logical' AND active_pid IS NOT NULL)) r ON r.pid = s.active_pid
		ORDER BY 1, 4`)
	if err != nil {
		return f, fmt.Errorf("reading the standbys: %w", err)
	}
	for rows.Next() {
		var s Standby
		if err := rows.Scan(&s.Slot, &s.Active, &s.Feedback, &s.Application, &s.State, &s.FlushLSN); err != nil {
			rows.Close()
			return f, fmt.Errorf("reading the standbys: %w", err)
		}
		s.Named = s.Slot != "" && slices.Contains(f.SynchronizedStandbySlots, s.Slot)
		f.Standbys = append(f.Standbys, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return f, fmt.Errorf("reading the standbys: %w", err)
	}
	// A slot synchronization worker is a client backend connected to a
	// database with primary_conninfo's application_name (the standby's
	// walreceiver's), or "[<cluster_name>_]slotsync worker" when that has
	// none.
	if err := q.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity a
		WHERE a.backend_type = 'client backend' AND a.datname IS NOT NULL AND (a.application_name LIKE '%slotsync worker'
			OR a.application_name IN (SELECT application_name FROM pg_catalog.pg_stat_replication WHERE application_name <> ''))`).Scan(&f.SlotSyncWorkers); err != nil {
		return f, fmt.Errorf("reading the slot synchronization workers: %w", err)
	}
	f.judge()
	return f, nil
}

// judge sets Possible and Why from what was read.
func (f *Failover) judge() {
	f.Unknown = "the primary cannot see a standby's sync_replication_slots or the dbname in its primary_conninfo; a connected slotsync worker shows both are set, and on the standby SELECT synced FROM pg_replication_slots shows the slot"
	if f.InRecovery {
		f.Why = append(f.Why, "the source is a standby: the slot lives on the primary")
	}
	if !f.SlotFailover {
		f.Why = append(f.Why, "the slot has failover off (the reader turns it on with ALTER_REPLICATION_SLOT ... (FAILOVER true) when it starts)")
	}
	ready := 0
	for _, s := range f.Standbys {
		switch {
		case s.Slot == "":
			f.Why = append(f.Why, fmt.Sprintf("standby %q streams without a physical slot: set primary_slot_name on it", s.Application))
		case !s.Active:
			f.Why = append(f.Why, fmt.Sprintf("physical slot %s has no standby streaming from it", s.Slot))
		case !s.Named:
			f.Why = append(f.Why, fmt.Sprintf("physical slot %s is not in synchronized_standby_slots: the reader may receive changes that standby does not have yet, which a promotion of it loses", s.Slot))
		case !s.Feedback:
			f.Why = append(f.Why, fmt.Sprintf("the standby on physical slot %s sends no feedback: set hot_standby_feedback = on on it", s.Slot))
		default:
			ready++
		}
	}
	if len(f.Standbys) == 0 {
		f.Why = append(f.Why, "no standby streams from this server")
	}
	if f.SlotSyncWorkers == 0 {
		f.Why = append(f.Why, "no standby's slot synchronization worker is connected: set sync_replication_slots = on and a dbname in primary_conninfo on the standby")
	}
	for _, n := range f.SynchronizedStandbySlots {
		if !slices.ContainsFunc(f.Standbys, func(s Standby) bool { return s.Slot == n }) {
			f.Why = append(f.Why, fmt.Sprintf("synchronized_standby_slots names %s, which does not exist: the reader receives nothing until it does", n))
		}
	}
	f.Possible = !f.InRecovery && f.SlotFailover && ready > 0 && f.SlotSyncWorkers > 0
}
