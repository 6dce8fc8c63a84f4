package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/proto"
)

// DestinationState is an operator-set lifecycle state of a destination.
// A destination without a row is Active.
type DestinationState string

// Destination lifecycle states.
const (
	// Active: routed, buffered and flushed normally.
	Active DestinationState = "active"
	// Paused: routed and buffered (bounded), never flushed.
	Paused DestinationState = "paused"
	// Draining: its buffer is flushed now; the flusher that owns its
	// partition then sets Drained.
	Draining DestinationState = "draining"
	// Drained: everything buffered when the drain was seen is in packs;
	// it then behaves like Paused.
	Drained DestinationState = "drained"
	// Retired: the router drops its rows and the flusher acks and discards
	// its messages; its packs are kept. Final.
	Retired DestinationState = "retired"
)

// Valid reports whether s is one of the states.
func (s DestinationState) Valid() bool {
	switch s {
	case Active, Paused, Draining, Drained, Retired:
		return true
	}
	return false
}

// Holds reports whether a flusher must keep s's changes buffered without
// flushing them (paused or drained).
func (s DestinationState) Holds() bool { return s == Paused || s == Drained }

// allowed is the transition table: allowed[from][to]. Setting the state a
// destination is already in is allowed (idempotent) except into Drained,
// which only the flusher writes, from Draining.
var allowed = map[DestinationState]map[DestinationState]bool{
	Active:   {Active: true, Paused: true, Draining: true, Retired: true},
	Paused:   {Paused: true, Active: true, Draining: true, Retired: true},
	Draining: {Draining: true, Active: true, Drained: true, Retired: true},
	Drained:  {Drained: true, Active: true, Draining: true, Retired: true},
	Retired:  {Retired: true},
}

// DestinationStateRow is one row of the destination_states table.
type DestinationStateRow struct {
	Destination string           `json:"destination"`
	State       DestinationState `json:"state"`
	Reason      string           `json:"reason,omitempty"`
	ChangedAt   time.Time        `json:"changed_at"`
	Version     int64            `json:"version"`
}

// DestinationStates reads and changes destination lifecycle states.
type DestinationStates struct {
	pool                  *pgxpool.Pool
	schema                string
	qLock, qSeed, qSelect string
	qUpdate, qChanges     string
}

// NewDestinationStates returns the destination states of the state schema
// (DefaultSchema when empty). Migrate must have run.
func NewDestinationStates(pool *pgxpool.Pool, schema string) *DestinationStates {
	if schema == "" {
		schema = DefaultSchema
	}
	t := pgx.Identifier{schema, "destination_states"}.Sanitize()
	seq := pgx.Identifier{schema, "destination_states_version"}.Sanitize()
	return &DestinationStates{
		pool:   pool,
		schema: schema,
		// Writers serialize on one transaction-scoped advisory lock, so
		// versions commit in the order they were drawn and a reader that
		// asks for version > last never skips a row committed later with
		// a smaller version.
		qLock: `SELECT pg_advisory_xact_lock(hashtextextended('sluice.state.destination_states:' || $1, 0))`,
		qSeed: `INSERT INTO ` + t + ` (destination, state, version) VALUES ($1, 'active', nextval('` + seq + `'))
			ON CONFLICT (destination) DO NOTHING`,
		qSelect: `SELECT state FROM ` + t + ` WHERE destination = $1 FOR UPDATE`,
		qUpdate: `UPDATE ` + t + ` SET state = $2, reason = NULLIF($3, ''), changed_at = now(), version = nextval('` + seq + `')
			WHERE destination = $1`,
		qChanges: `SELECT destination, state, coalesce(reason, ''), changed_at, version FROM ` + t + `
			WHERE version > $1 ORDER BY version`,
	}
}

// Set moves dest to state to, recording reason, and returns the state it
// was in. A refused transition returns ErrTransition (and, out of Retired,
// ErrRetired) naming both states; a destination that has never been set is
// Active, so one that has not been seen yet can be paused or retired ahead
// of time.
func (s *DestinationStates) Set(ctx context.Context, dest string, to DestinationState, reason string) (DestinationState, error) {
	if err := proto.ValidateDestination(dest); err != nil {
		return "", fmt.Errorf("setting destination state: %w: %v", ErrBadArgument, err)
	}
	if !to.Valid() {
		return "", fmt.Errorf("setting destination %s state: %w: unknown state %q", dest, ErrBadArgument, to)
	}
	var from DestinationState
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.qLock, s.schema); err != nil {
			return fmt.Errorf("taking the destination-state lock: %w", err)
		}
		if _, err := tx.Exec(ctx, s.qSeed, dest); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, s.qSelect, dest).Scan(&from); err != nil {
			return err
		}
		if err := CheckTransition(dest, from, to); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, s.qUpdate, dest, string(to), reason)
		return err
	})
	if err != nil {
		return from, fmt.Errorf("setting destination %s to %s: %w", dest, to, err)
	}
	return from, nil
}

// CheckTransition reports whether dest may move from one state to another.
func CheckTransition(dest string, from, to DestinationState) error {
	if allowed[from][to] {
		return nil
	}
	if from == Retired {
		return fmt.Errorf("%w: %w: %s is retired and retirement is final: its rows were dropped while it was retired, so its copy has a gap and cannot be resumed (re-create it under a new name, or rebuild it from the source)",
			ErrTransition, ErrRetired, dest)
	}
	if to == Drained {
		return fmt.Errorf("%w: %s is %s: only a draining destination becomes drained", ErrTransition, dest, from)
	}
	return fmt.Errorf("%w: %s is %s and cannot become %s", ErrTransition, dest, from, to)
}

// Load returns every destination that has a row (Active ones included,
// once set), and the highest version among them.
func (s *DestinationStates) Load(ctx context.Context) ([]DestinationStateRow, int64, error) {
	return s.Changes(ctx, 0)
}

// Changes returns the rows changed after version since, in version order,
// and the highest version returned (since when there are none).
func (s *DestinationStates) Changes(ctx context.Context, since int64) ([]DestinationStateRow, int64, error) {
	rows, err := s.pool.Query(ctx, s.qChanges, since)
	if err != nil {
		return nil, since, fmt.Errorf("loading destination states: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DestinationStateRow, error) {
		var d DestinationStateRow
		err := r.Scan(&d.Destination, &d.State, &d.Reason, &d.ChangedAt, &d.Version)
		return d, err
	})
	if err != nil {
		return nil, since, fmt.Errorf("loading destination states: %w", err)
	}
	hi := since
	for _, d := range out {
		hi = max(hi, d.Version)
	}
	return out, hi, nil
}

// DestinationCache is a poller's copy of the destination states. Get is
// lock-free (an atomic pointer to an immutable map) and safe on hot paths.
type DestinationCache struct {
	states *DestinationStates
	log    *slog.Logger
	cur    atomic.Pointer[map[string]DestinationState]

	mu        sync.Mutex // guards version, fns, refreshed; serializes Refresh
	version   int64
	loaded    bool
	polls     int
	fns       []func(changed map[string]DestinationState)
	refreshed []func(ctx context.Context)
}

// fullReloadEvery: every this many polls the cache reloads the whole table
// instead of asking for changes (belt and braces; the table is small).
const fullReloadEvery = 60

// NewDestinationCache returns an empty cache (every destination Active)
// over s; call Refresh once and Run to keep it current.
func NewDestinationCache(s *DestinationStates, log *slog.Logger) *DestinationCache {
	if log == nil {
		log = slog.Default()
	}
	c := &DestinationCache{states: s, log: log}
	empty := map[string]DestinationState{}
	c.cur.Store(&empty)
	return c
}

// Get returns dest's state as last polled (Active when it has none). A nil
// cache answers Active.
func (c *DestinationCache) Get(dest string) DestinationState {
	if c == nil {
		return Active
	}
	if s, ok := (*c.cur.Load())[dest]; ok {
		return s
	}
	return Active
}

// All returns every destination whose polled state is not Active.
func (c *DestinationCache) All() map[string]DestinationState {
	if c == nil {
		return nil
	}
	return maps.Clone(*c.cur.Load())
}

// OnChange registers fn, called after each refresh that changed anything,
// with the changed destinations and their new states (Active included).
// fn runs on the polling goroutine and must not block for long.
func (c *DestinationCache) OnChange(fn func(changed map[string]DestinationState)) {
	c.mu.Lock()
	c.fns = append(c.fns, fn)
	c.mu.Unlock()
}

// OnRefresh registers fn, called by Run after every refresh that
// succeeded (changed or not), on the polling goroutine and outside the
// cache's lock, so fn may write the states (the flusher marks drained
// destinations: services/flusher delivery lifecycle.go).
func (c *DestinationCache) OnRefresh(fn func(ctx context.Context)) {
	c.mu.Lock()
	c.refreshed = append(c.refreshed, fn)
	c.mu.Unlock()
}

// Refresh loads what changed since the last refresh (everything on the
// first call, and every fullReloadEvery calls) and publishes it.
func (c *DestinationCache) Refresh(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	full := !c.loaded || c.polls%fullReloadEvery == 0
	c.polls++
	since := c.version
	if full {
		since = 0
	}
	rows, hi, err := c.states.Changes(ctx, since)
	if err != nil {
		return err
	}
	old := *c.cur.Load()
	next := map[string]DestinationState{}
	if !full {
		maps.Copy(next, old)
	}
	for _, r := range rows {
		if r.State == Active {
			delete(next, r.Destination)
		} else {
			next[r.Destination] = r.State
		}
	}
	changed := map[string]DestinationState{}
	for d, s := range next {
		if old[d] != s {
			changed[d] = s
		}
	}
	for d := range old {
		if _, ok := next[d]; !ok {
			changed[d] = Active
		}
	}
	c.version = max(c.version, hi)
	c.loaded = true
	if len(changed) == 0 {
		return nil
	}
	c.cur.Store(&next)
	for d, s := range changed {
		c.log.Info("destination state changed", "destination", d, "state", string(s))
	}
	for _, fn := range c.fns {
		fn(changed)
	}
	return nil
}

// Run refreshes every interval until ctx ends; it returns nil then. A
// failed refresh is logged once per run of failures and retried on the
// next tick (the cache keeps the last states it knew); after a refresh
// that succeeded it calls the OnRefresh functions.
func (c *DestinationCache) Run(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		err := c.Refresh(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			c.log.Warn("polling destination states", "error", err)
		case err == nil && failing:
			failing = false
			c.log.Info("polling destination states recovered")
		}
		if err == nil {
			c.mu.Lock()
			fns := c.refreshed
			c.mu.Unlock()
			for _, fn := range fns {
				fn(ctx)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// IsRefused reports whether err is a refused transition (ErrTransition).
func IsRefused(err error) bool { return errors.Is(err, ErrTransition) }

// Loaded reports whether the cache has refreshed successfully at least
// once (before that, Get answers Active for every destination).
func (c *DestinationCache) Loaded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loaded
}
