package catalog

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// Tenant erasure. A purge of a (retired) destination D, all under the
// publisher lease's fence:
//
//  1. refuses while a pinned snapshot holds a member of D (ErrPurgePinned
//     names the pin: unpin it first; there is no --force, so that erasing
//     a tenant never silently breaks what someone pinned for an audit);
//  2. per table, rewrites the other destinations' rows of every file that
//     holds D's rows (a compaction of just those members: reads of the
//     other destinations are unchanged, see compact.go) and publishes the
//     replacement that removes every member of D and those rewritten
//     members (PublishReplace);
//  3. advances the expiry horizon to that replacement, so every older
//     snapshot (they all hold D) is expired at once;
//  4. collects garbage without waiting for gc_grace for D's members and
//     for the files that hold D's rows (gc.go, GCOptions.purge).
//
// Every step is idempotent: a purge killed anywhere is finished by running
// it again. PurgeStatus says what of D remains.

// purgeNoRewrite makes a purge leave the files it shares with other
// destinations as they are: a test knob (negative control).
var purgeNoRewrite bool

// ErrPurgePinned is returned (wrapped, naming the pin) when a pinned
// snapshot holds the destination a purge would erase.
var ErrPurgePinned = errors.New("a pinned snapshot holds the destination")

// PurgeStatus is what remains of a destination in the catalog.
type PurgeStatus struct {
	Destination string `json:"destination"`
	// Members of the latest snapshot.
	Members int `json:"members"`
	// Inventory rows (published or not, removed or not); a file of the
	// store is deleted before its inventory rows, so none left means no
	// file of the store holds the destination's rows.
	InventoryRows int `json:"inventory_rows"`
	// Rows in the rows tables.
	Rows int64 `json:"rows"`
	// Done: nothing of the destination remains.
	Done bool `json:"done"`
}

// PurgeStatus reads what remains of destination.
func (c *Catalog) PurgeStatus(ctx context.Context, destination string) (PurgeStatus, error) {
	st := PurgeStatus{Destination: destination}
	if latest, err := c.Latest(ctx); err == nil {
		ms, err := c.Members(ctx, latest.Version, destination, "")
		if err != nil {
			return st, err
		}
		st.Members = len(ms)
	} else if !errors.Is(err, ErrNoSnapshot) {
		return st, err
	}
	res, err := c.conn.Query(ctx, "SELECT count() FROM "+ident(c.n.packs())+" WHERE destination = "+quote(destination))
	if err != nil {
		return st, fmt.Errorf("reading what remains of %s: %w", destination, err)
	}
	st.InventoryRows = int(asUint(res.Rows[0][0]))
	if err := c.loadTables(ctx, false); err != nil {
		return st, err
	}
	c.mu.Lock()
	var tables []string // every generation's rows table
	for t, ts := range c.tables {
		for g := 1; g <= max(ts.info.Generation, 1); g++ {
			tables = append(tables, c.n.rowsGen(t, g))
		}
	}
	c.mu.Unlock()
	sort.Strings(tables)
	for _, t := range tables {
		res, err := c.conn.Query(ctx, "SELECT count() FROM "+ident(t)+" WHERE "+ident(rowDest)+" = "+quote(destination))
		if err != nil {
			return st, fmt.Errorf("reading what remains of %s in %s: %w", destination, t, err)
		}
		st.Rows += asInt(res.Rows[0][0])
	}
	st.Done = st.Members == 0 && st.InventoryRows == 0 && st.Rows == 0
	return st, nil
}

// checkPurgePins returns ErrPurgePinned naming the first pinned snapshot
// that holds a member of destination.
func (c *Catalog) checkPurgePins(ctx context.Context, destination string) error {
	pins, err := c.Pins(ctx)
	if err != nil {
		return err
	}
	vs := make([]uint64, 0, len(pins))
	for v := range pins {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	for _, v := range vs {
		ms, err := c.Members(ctx, v, destination, "")
		if err != nil {
			return err
		}
		if len(ms) > 0 {
			reason := ""
			if r := pins[v].Reason; r != "" {
				reason = " (" + r + ")"
			}
			return fmt.Errorf("%w: snapshot %d%s is pinned and holds %s; unpin it (sluice snapshots unpin %d) to purge", ErrPurgePinned, v, reason, destination, v)
		}
	}
	return nil
}

// Purge erases destination from the catalog and store (see the comment at
// the top of this file) and returns what remains; the caller checks that
// the destination is retired. writer names the rewritten segments' writer.
func (c *Catalog) Purge(ctx context.Context, l Lease, ttl time.Duration, store packstore.Store, destination, writer string) (PurgeStatus, Lease, error) {
	if err := proto.ValidateDestination(destination); err != nil {
		return PurgeStatus{}, l, err
	}
	if err := c.checkPurgePins(ctx, destination); err != nil {
		return PurgeStatus{}, l, err
	}
	latest, err := c.Latest(ctx)
	if err != nil && !errors.Is(err, ErrNoSnapshot) {
		return PurgeStatus{}, l, err
	}
	if err == nil {
		mine, err := c.Members(ctx, latest.Version, destination, "")
		if err != nil {
			return PurgeStatus{}, l, err
		}
		byTable := map[string][]Member{}
		for _, m := range mine {
			byTable[m.Table] = append(byTable[m.Table], m)
		}
		// Tables where D has members, and tables where a file still holds
		// D's rows beside live members of other destinations.
		shared, err := c.sharedFiles(ctx, latest.Version, store.ID(), destination)
		if err != nil {
			return PurgeStatus{}, l, err
		}
		if purgeNoRewrite {
			shared = nil
		}
		tables := map[string]bool{}
		for t := range byTable {
			tables[t] = true
		}
		for _, f := range shared {
			tables[f.table] = true
		}
		names := make([]string, 0, len(tables))
		for t := range tables {
			names = append(names, t)
		}
		sort.Strings(names)
		for _, t := range names {
			extra := byTable[t]
			groups := map[string]map[string]bool{} // fingerprint -> pack ids
			dests := map[string]map[string]bool{}  // fingerprint -> destinations
			for _, f := range shared {
				if f.table != t {
					continue
				}
				if groups[f.fingerprint] == nil {
					groups[f.fingerprint], dests[f.fingerprint] = map[string]bool{}, map[string]bool{}
				}
				groups[f.fingerprint][f.packID] = true
				dests[f.fingerprint][f.destination] = true
			}
			fps := make([]string, 0, len(groups))
			for fp := range groups {
				fps = append(fps, fp)
			}
			sort.Strings(fps)
			for _, fp := range fps {
				v, err := c.Latest(ctx)
				if err != nil {
					return PurgeStatus{}, l, err
				}
				ds := make([]string, 0, len(dests[fp]))
				for d := range dests[fp] {
					ds = append(ds, d)
				}
				sort.Strings(ds)
				if _, l, err = c.compactDestinations(ctx, l, ttl, store, v.Version, t, fp, ds, extra, groups[fp], writer); err != nil {
					return PurgeStatus{}, l, fmt.Errorf("purging %s: %w", destination, err)
				}
				extra = nil
			}
			if len(extra) > 0 {
				res, err := c.PublishReplace(ctx, l, ttl, extra)
				l = res.Lease
				if err != nil {
					return PurgeStatus{}, l, fmt.Errorf("purging %s: %w", destination, err)
				}
			}
		}
		// Expire every snapshot before the latest (each holds D).
		if err := c.advanceHorizonToLatest(ctx, l); err != nil {
			return PurgeStatus{}, l, fmt.Errorf("purging %s: %w", destination, err)
		}
	}
	// A pin that landed since the check holds only versions that were
	// retained then; checked again before anything is deleted.
	if err := c.checkPurgePins(ctx, destination); err != nil {
		return PurgeStatus{}, l, err
	}
	for {
		gs, err := c.CollectGarbage(ctx, store, GCOptions{Destination: destination, purge: true, NoWatermarks: true})
		if err != nil {
			return PurgeStatus{}, l, fmt.Errorf("purging %s: %w", destination, err)
		}
		if gs.Members < gcMaxMembers {
			break
		}
	}
	st, err := c.PurgeStatus(ctx, destination)
	return st, l, err
}

// sharedFile is a live member of another destination in a file that
// holds the purged destination's rows.
type sharedFile struct {
	table, fingerprint, packID, destination string
}

// sharedFiles returns the members of the latest snapshot v, of
// destinations other than destination, whose files (in store) also hold
// destination's rows (any inventory row of it, member or not).
func (c *Catalog) sharedFiles(ctx context.Context, v uint64, storeID, destination string) ([]sharedFile, error) {
	hw, err := c.highWater(ctx, v)
	if err != nil {
		return nil, err
	}
	pt := ident(c.n.packs())
	q := fmt.Sprintf(`SELECT DISTINCT table, fingerprint, pack_id, destination FROM %s WHERE %s AND destination != %s AND store_id = %s
		AND pack_id IN (SELECT pack_id FROM %s WHERE destination = %s AND store_id = %s) ORDER BY table, pack_id, destination`,
		pt, c.memberRows(u64(v), u64(hw), "", ""), quote(destination), quote(storeID), pt, quote(destination), quote(storeID))
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("reading the files that hold %s: %w", destination, err)
	}
	var out []sharedFile
	for _, r := range res.Rows {
		out = append(out, sharedFile{asString(r[0]), asString(r[1]), asString(r[2]), asString(r[3])})
	}
	return out, nil
}

// advanceHorizonToLatest moves the expiry horizon up to the latest
// snapshot (fenced on l, only upwards): every older snapshot that is not
// pinned expires.
func (c *Catalog) advanceHorizonToLatest(ctx context.Context, l Lease) error {
	q := fmt.Sprintf(`INSERT INTO %s (horizon, advanced_at, lease_id)
		WITH %s AS cur, (SELECT max(version) FROM %s) AS newest
		SELECT newest, %s, %s WHERE newest > cur AND %s`+tiny,
		ident(c.n.retention()), c.horizonSQL(), ident(c.n.watermark()), nowMicros, quote(l.LeaseID), c.fence(l.LeaseID, "", ""))
	if err := c.conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("advancing the expiry horizon: %w", err)
	}
	return nil
}

// purgeDDL creates the purge requests: append-only rows, the newest per
// destination (by at, then row id) its state: requested (by the API),
// done or failed (by the publisher that ran it, with the error).
func purgeDDL(n names) string {
	return "CREATE TABLE IF NOT EXISTS " + ident(n.purges()) + ` (
		destination String, state String, message String, at Int64, id String) ENGINE = MergeTree ORDER BY (destination, at, id)`
}

// Purge request states.
const (
	PurgeRequested = "requested"
	PurgeDone      = "done"
	PurgeFailed    = "failed"
)

// PurgeRequest is a destination's newest purge request row.
type PurgeRequest struct {
	Destination string    `json:"destination"`
	State       string    `json:"state"`
	Message     string    `json:"message,omitempty"`
	At          time.Time `json:"at"`
}

// RequestPurge asks the active publisher to purge destination (it runs
// Purge on its next lifecycle tick). The caller has checked that the
// destination is retired; a pin holding it is refused here already.
func (c *Catalog) RequestPurge(ctx context.Context, destination string) error {
	if err := proto.ValidateDestination(destination); err != nil {
		return err
	}
	if err := c.checkPurgePins(ctx, destination); err != nil {
		return err
	}
	return c.recordPurge(ctx, destination, PurgeRequested, "")
}

func (c *Catalog) recordPurge(ctx context.Context, destination, state, msg string) error {
	q := fmt.Sprintf("INSERT INTO %s (destination, state, message, at, id) VALUES (%s, %s, %s, %s, %s)",
		ident(c.n.purges()), quote(destination), quote(state), quote(msg), nowMicros, quote(uuid.NewString()))
	if err := c.conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("recording the purge of %s: %w", destination, err)
	}
	return nil
}

// PurgeRequests returns each destination's newest purge request row
// ("" all destinations).
func (c *Catalog) PurgeRequests(ctx context.Context, destination string) ([]PurgeRequest, error) {
	where := ""
	if destination != "" {
		where = " WHERE destination = " + quote(destination)
	}
	res, err := c.conn.Query(ctx, "SELECT destination, argMax((state, message, at), (at, id)) FROM "+ident(c.n.purges())+where+" GROUP BY destination ORDER BY destination")
	if err != nil {
		return nil, fmt.Errorf("reading purge requests: %w", err)
	}
	var out []PurgeRequest
	for _, r := range res.Rows {
		t, _ := r[1].([]any)
		if len(t) != 3 {
			return nil, fmt.Errorf("reading purge requests: unexpected row %v", r)
		}
		out = append(out, PurgeRequest{Destination: asString(r[0]), State: asString(t[0]), Message: asString(t[1]), At: time.UnixMicro(asInt(t[2])).UTC()})
	}
	return out, nil
}

// RunPurges runs every requested purge (the active publisher's lifecycle
// tick) and records each outcome; it returns the lease as the publishes
// left it.
func (c *Catalog) RunPurges(ctx context.Context, l Lease, ttl time.Duration, store packstore.Store, writer string) (Lease, error) {
	reqs, err := c.PurgeRequests(ctx, "")
	if err != nil {
		return l, err
	}
	for _, r := range reqs {
		if r.State != PurgeRequested {
			continue
		}
		st, l2, err := c.Purge(ctx, l, ttl, store, r.Destination, writer)
		l = l2
		switch {
		case errors.Is(err, ErrLeaseLost) || ctx.Err() != nil:
			return l, err
		case err != nil:
			c.log.Warn("purge failed", "destination", r.Destination, "err", err)
			if rerr := c.recordPurge(ctx, r.Destination, PurgeFailed, err.Error()); rerr != nil {
				return l, rerr
			}
		case st.Done:
			c.log.Info("destination purged", "destination", r.Destination)
			if err := c.recordPurge(ctx, r.Destination, PurgeDone, ""); err != nil {
				return l, err
			}
		}
	}
	return l, nil
}
