package catalog

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// CompactPolicy is catalog.compact_min_packs, catalog.compact_small_bytes
// and catalog.compact_max_bytes.
type CompactPolicy struct {
	// MinPacks: a (destination, table) with at least this many members is
	// compacted.
	MinPacks int
	// SmallBytes: a member smaller than this is small; a (destination,
	// table) with at least two members whose small members add up to
	// SmallBytes is compacted too. A member's size is its destination's
	// share of the file: a pack's bytes, or a segment's bytes times the
	// destination's fraction of the segment's rows (a flush's segment
	// holds up to 4,096 destinations, a compacted one more: a member of one
	// is not the whole file).
	SmallBytes int64
	// MaxBytes bounds the bytes of the member files one pass reads, each
	// file counted once (at least one destination is taken whatever its
	// size), so a pass never holds the engine and the publisher long.
	MaxBytes int64
}

// Validate checks the policy.
func (p CompactPolicy) Validate() error {
	if p.MinPacks < 2 || p.SmallBytes < 1 || p.MaxBytes < 1 {
		return fmt.Errorf("compaction policy: min_packs %d must be at least 2, small_bytes %d and max_bytes %d positive", p.MinPacks, p.SmallBytes, p.MaxBytes)
	}
	return nil
}

// CompactStats describes one compaction.
type CompactStats struct {
	Table        string
	Destinations []string
	Members      int   // members removed
	Files        int   // distinct member files read
	InBytes      int64 // their bytes
	OutBytes     int64 // the segment's
	InRows       int64
	OutRows      int64
	Segment      string // the new segment's path
	Snapshot     Snapshot
	// Damaged are the member files this pass found it cannot read
	// (corrupt or missing): it left their destinations out and compacted
	// others. The caller dead-letters each, which halts its destinations
	// for its table (docs/adr/0034-corrupt-pack-halts.md); later passes of
	// this Catalog skip them.
	Damaged []DamagedMember
}

// DamagedMember is a member file compaction cannot read, with what halting
// its destinations needs: the inventory's rows of it.
type DamagedMember struct {
	StoreID, PackID, Path, Table, Fingerprint string
	Destinations                              []string // sorted
	First, Last                               proto.Position
	Bytes                                     int64
	Reason                                    string
}

// damagedFileError is a member file compactDestinations could not read.
type damagedFileError struct {
	packID, path string
	err          error
}

func (e *damagedFileError) Error() string { return e.err.Error() }
func (e *damagedFileError) Unwrap() error { return e.err }

// maxDamagedPerPass bounds the damaged files one pass reports before it
// gives up (each costs a pass's planning again).
const maxDamagedPerPass = 16

// compactCandidate is one (destination, table) a trigger chose.
type compactCandidate struct {
	table, fingerprint, destination string
	members                         int
	// files are the bytes of each member file (by pack id): a segment is a
	// member of every destination it holds, and a pass reads it once.
	files map[string]int64
}

// compactCandidates returns the (destination, table)s of the latest
// snapshot v that a trigger of p chose, whose members are all in store and
// of one schema fingerprint (compaction takes every member or none).
func (c *Catalog) compactCandidates(ctx context.Context, v uint64, storeID string, p CompactPolicy, destination string) ([]compactCandidate, error) {
	hw, err := c.highWater(ctx, v)
	if err != nil {
		return nil, err
	}
	// s is a member's size, its share of its file (CompactPolicy.SmallBytes;
	// a segment's total rows from segmentRows, a pack has none there); the
	// small trigger sums and judges those, while files keeps each file's
	// whole bytes (what a pass reads).
	q := fmt.Sprintf(`SELECT table, any(fingerprint), destination, count(), sum(s), sumIf(s, s < %[4]d), uniqExact(fingerprint), countIf(store_id != %[3]s), groupArray((pack_id, b))
		FROM (SELECT m.store_id AS store_id, m.pack_id AS pack_id, m.destination AS destination, m.table AS table, m.fingerprint AS fingerprint, m.b AS b,
				if(t.total > 0, toInt64(m.b * m.r / t.total), m.b) AS s
			FROM (SELECT store_id, pack_id, destination, any(table) AS table, any(fingerprint) AS fingerprint, any(bytes) AS b, any(rows) AS r FROM %[1]s WHERE %[2]s GROUP BY store_id, pack_id, destination) AS m
			LEFT JOIN (%[6]s) AS t ON m.store_id = t.store_id AND m.pack_id = t.pack_id)
		GROUP BY table, destination
		HAVING uniqExact(fingerprint) = 1 AND countIf(store_id != %[3]s) = 0 AND (count() >= %[5]d OR (count() >= 2 AND sumIf(s, s < %[4]d) >= %[4]d))
		ORDER BY count() DESC, table, destination`,
		ident(c.n.packs()), c.memberRows(u64(v), u64(hw), destination, ""), quote(storeID), p.SmallBytes, p.MinPacks, c.segmentRows(u64(hw), storeID, destination))
	if destination != "" { // a purge's rewrite: any member count
		q = strings.Replace(q, fmt.Sprintf("(count() >= %d OR", p.MinPacks), "(count() >= 1 OR", 1)
	}
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("choosing what to compact: %w", err)
	}
	var out []compactCandidate
	for _, r := range res.Rows {
		cd := compactCandidate{table: asString(r[0]), fingerprint: asString(r[1]), destination: asString(r[2]), members: int(asUint(r[3])), files: map[string]int64{}}
		fs, _ := r[8].([]any)
		for _, f := range fs {
			if t, ok := f.([]any); ok && len(t) == 2 {
				cd.files[asString(t[0])] = asInt(t[1])
			}
		}
		if len(cd.files) != cd.members {
			return nil, fmt.Errorf("choosing what to compact: destination %s of %s lists %d member files for %d members", cd.destination, cd.table, len(cd.files), cd.members)
		}
		out = append(out, cd)
	}
	return out, nil
}

// segmentRows is the statement of each segment's total rows (store_id,
// pack_id, total): the sum of its destinations' rows, over the inventory
// rows at or below high-water hw of the segments of storeID ("" destination:
// every segment; else those holding destination), for the share of a
// segment that is one member's size (CompactPolicy.SmallBytes). Removed
// members count: their rows are still in the file.
func (c *Catalog) segmentRows(hw, storeID, destination string) string {
	where := "_block_number <= " + hw + " AND store_id = " + quote(storeID) + " AND startsWith(path, " + quote(proto.SegmentsDir+"/") + ")"
	if destination != "" {
		where += " AND pack_id IN (SELECT pack_id FROM " + ident(c.n.packs()) + " WHERE _block_number <= " + hw + " AND store_id = " + quote(storeID) + " AND destination = " + quote(destination) + ")"
	}
	return "SELECT store_id, pack_id, sum(r) AS total FROM (SELECT store_id, pack_id, destination, any(rows) AS r FROM " + ident(c.n.packs()) +
		" WHERE " + where + " GROUP BY store_id, pack_id, destination) GROUP BY store_id, pack_id"
}

// Compact runs one compaction pass: it picks the table with the largest
// (destination, table) a trigger of p chose, takes every chosen
// destination of that table and schema while the distinct files their
// members are in add up to at most p.MaxBytes (a segment holding several
// of them is read once), writes their members at the latest snapshot as
// one segment (buildCompacted) into store, indexes it, and publishes the replacement (PublishReplace: the
// lease's fence) that removes exactly those members. writer names the
// segment's writer (proto.SegmentID). Nothing to do returns a zero
// CompactStats. The lease as the publish left it is returned.
func (c *Catalog) Compact(ctx context.Context, l Lease, ttl time.Duration, store packstore.Store, p CompactPolicy, writer string) (CompactStats, Lease, error) {
	if err := p.Validate(); err != nil {
		return CompactStats{}, l, err
	}
	latest, err := c.Latest(ctx)
	if errors.Is(err, ErrNoSnapshot) {
		return CompactStats{}, l, nil
	}
	if err != nil {
		return CompactStats{}, l, err
	}
	// A damaged member file makes its destinations' candidates
	// impossible: they are left out and the pass goes on with the others,
	// reporting each damaged file once (Damaged).
	var damaged []DamagedMember
	for {
		cands, err := c.compactCandidates(ctx, latest.Version, store.ID(), p, "")
		if err != nil {
			return CompactStats{Damaged: damaged}, l, err
		}
		cands = c.withoutDamaged(store.ID(), cands)
		if len(cands) == 0 {
			return CompactStats{Damaged: damaged}, l, nil
		}
		st, l2, err := c.compactFirst(ctx, l, ttl, store, latest.Version, p, cands, writer)
		l = l2
		var dm *damagedFileError
		if !errors.As(err, &dm) {
			st.Damaged = damaged
			return st, l, err
		}
		d, derr := c.damagedMember(ctx, store.ID(), dm)
		if derr != nil {
			return CompactStats{Damaged: damaged}, l, derr
		}
		c.mu.Lock()
		if c.damaged == nil {
			c.damaged = map[PackKey]string{}
		}
		c.damaged[PackKey{store.ID(), dm.packID}] = d.Reason
		c.mu.Unlock()
		c.log.Warn("compaction skips a damaged member file", "path", d.Path, "table", d.Table, "destinations", len(d.Destinations), "err", d.Reason)
		damaged = append(damaged, d)
		if len(damaged) >= maxDamagedPerPass {
			return CompactStats{Damaged: damaged}, l, nil
		}
	}
}

// withoutDamaged drops the candidates with a member in a damaged file.
func (c *Catalog) withoutDamaged(storeID string, cands []compactCandidate) []compactCandidate {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.damaged) == 0 {
		return cands
	}
	out := cands[:0:0]
	for _, cd := range cands {
		ok := true
		for id := range cd.files {
			if _, bad := c.damaged[PackKey{storeID, id}]; bad {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, cd)
		}
	}
	return out
}

// damagedMember reads what the inventory records of the damaged file:
// its table, destinations and positions.
func (c *Catalog) damagedMember(ctx context.Context, storeID string, dm *damagedFileError) (DamagedMember, error) {
	d := DamagedMember{StoreID: storeID, PackID: dm.packID, Path: dm.path, Reason: dm.err.Error()}
	res, err := c.conn.Query(ctx, "SELECT destination, any(table), any(fingerprint), min((first_lsn, first_seq)), max((last_lsn, last_seq)), any(bytes) FROM "+ident(c.n.packs())+
		" WHERE store_id = "+quote(storeID)+" AND pack_id = "+quote(dm.packID)+" GROUP BY destination ORDER BY destination")
	if err != nil {
		return d, fmt.Errorf("reading the inventory of damaged file %s: %w", dm.path, err)
	}
	for i, r := range res.Rows {
		d.Destinations = append(d.Destinations, asString(r[0]))
		d.Table, d.Fingerprint, d.Bytes = asString(r[1]), asString(r[2]), asInt(r[5])
		first, last := asPosition(r[3]), asPosition(r[4])
		if i == 0 || first.Less(d.First) {
			d.First = first
		}
		if i == 0 || d.Last.Less(last) {
			d.Last = last
		}
	}
	return d, nil
}

// asPosition reads a (lsn, seq) tuple value.
func asPosition(v any) proto.Position {
	t, _ := v.([]any)
	if len(t) != 2 {
		return proto.Position{}
	}
	return proto.Position{LSN: proto.LSN(asUint(t[0])), Seq: asUint(t[1])}
}

// compactFirst compacts the table of the first of cands: every chosen
// destination of that table and schema while the distinct files their
// members are in add up to at most p.MaxBytes.
func (c *Catalog) compactFirst(ctx context.Context, l Lease, ttl time.Duration, store packstore.Store, v uint64, p CompactPolicy, cands []compactCandidate, writer string) (CompactStats, Lease, error) {
	first := cands[0]
	var chosen []string
	var bytes int64
	read := map[string]bool{} // the files the chosen destinations' members are in
	for _, cd := range cands {
		if cd.table != first.table || cd.fingerprint != first.fingerprint {
			continue
		}
		var more int64
		for id, b := range cd.files {
			if !read[id] {
				more += b
			}
		}
		if len(chosen) > 0 && bytes+more > p.MaxBytes {
			continue
		}
		chosen = append(chosen, cd.destination)
		bytes += more
		for id := range cd.files {
			read[id] = true
		}
	}
	return c.compactDestinations(ctx, l, ttl, store, v, first.table, first.fingerprint, chosen, nil, nil, writer)
}

// compactDestinations compacts every member of dests' table at version v
// (the latest) into one segment and publishes the replacement, which also
// removes extra (a purge's members). Every member must be in store and of
// schema fp. A purge passes only: then just the members whose pack is in
// it are rewritten (the other destinations of the files that hold the
// purged destination's rows). Rewriting a subset keeps reads too, because
// the rows are kept verbatim (see the top of this file); the periodic
// compaction takes every member all the same, so that a destination's
// history folds into one file.
func (c *Catalog) compactDestinations(ctx context.Context, l Lease, ttl time.Duration, store packstore.Store, v uint64, table, fp string, dests []string, extra []Member, only map[string]bool, writer string) (CompactStats, Lease, error) {
	st := CompactStats{Table: table, Destinations: dests}
	// Reading, rewriting, storing and indexing the members can take
	// longer than the lease's ttl (27 s over a backfilled table on a busy
	// 2-core machine, against the 10 s default, so that pass failed every
	// time, issue 32): the lease is renewed (fenced) first, then every
	// ttl/3 while they run, none of them touching it, and once more after,
	// so that the replacement publishes on a live lease. A pass that finds
	// it lost stores and indexes nothing more (writeCompacted).
	l, err := c.RenewLease(ctx, l, ttl)
	if err != nil {
		return st, l, fmt.Errorf("compacting %s: %w", table, err)
	}
	kept := c.keepLease(ctx, l, ttl)
	defer kept.stop() // an early return: the keeping ends (and its renewal in flight) with it
	all, err := c.Members(ctx, v, "", table)
	if err != nil {
		return st, l, err
	}
	want := map[string]bool{}
	for _, d := range dests {
		want[d] = true
	}
	var removed []Member
	packs := map[string]bool{}
	for _, m := range all {
		if want[m.Destination] && (only == nil || only[m.PackID]) {
			removed = append(removed, m)
			packs[m.PackID] = true
		}
	}
	paths, sizes, err := c.packPaths(ctx, store.ID(), packs)
	if err != nil {
		return st, l, err
	}
	var ins []CompactInput
	for _, d := range dests {
		in := CompactInput{Destination: d}
		for _, m := range removed {
			if m.Destination == d {
				in.Paths = append(in.Paths, paths[m.PackID])
			}
		}
		if len(in.Paths) > 0 {
			ins = append(ins, in)
		}
	}
	for id := range packs {
		st.Files++
		st.InBytes += sizes[id]
	}
	var seg CompactedSegment
	if len(ins) > 0 {
		seg, err = buildCompacted(ctx, store, table, fp, proto.SegmentID(time.Now(), writer, 0), ins)
		var bad *damagedFileError
		if errors.As(err, &bad) {
			for pid, p := range paths {
				if p == bad.path {
					bad.packID = pid
				}
			}
		}
		if err != nil {
			l, _ = kept.stop()
			return st, l, err
		}
		st.InRows, st.OutRows, st.OutBytes, st.Segment = seg.InRows, seg.OutRows, int64(len(seg.Data)), seg.Path
		if err := c.writeCompacted(ctx, kept, store, table, seg); err != nil {
			l, _ = kept.stop()
			return st, l, err
		}
	}
	l, err = kept.stop()
	if err != nil {
		return st, l, fmt.Errorf("compacting %s: %w", table, err)
	}
	if len(ins) > 0 {
		if l, err = c.RenewLease(ctx, l, ttl); err != nil {
			return st, l, fmt.Errorf("compacting %s: %w", table, err)
		}
	}
	removed = append(removed, extra...)
	if len(removed) == 0 {
		return st, l, nil
	}
	if compactBeforePublish != nil {
		compactBeforePublish()
	}
	// The removals go in publishes of at most maxRemovalsPerPublish (each
	// publish statement carries its removal set as literals, under the
	// engine's query size limit). Between two of them the snapshot holds
	// the new segment beside members it copies; it reads the same, since
	// a copy of a row changes no argMax (see the top of this file).
	for start := 0; start < len(removed); start += maxRemovalsPerPublish {
		res, err := c.PublishReplace(ctx, l, ttl, removed[start:min(start+maxRemovalsPerPublish, len(removed))])
		l = res.Lease
		if err != nil {
			return st, l, fmt.Errorf("compacting %s: %w", table, err)
		}
		st.Snapshot = res.Snapshot
	}
	res := PublishResult{Snapshot: st.Snapshot, Lease: l}
	st.Members = len(removed)
	c.log.Info("compacted", "table", table, "destinations", len(dests), "members", st.Members, "files", st.Files,
		"in_bytes", st.InBytes, "out_bytes", st.OutBytes, "in_rows", st.InRows, "out_rows", st.OutRows, "version", res.Snapshot.Version)
	return st, res.Lease, nil
}

// writeCompacted stores seg and indexes it while k keeps the lease. Once
// stored (the reconciler indexes a file it finds) and indexed, a publish
// admits the copy: so each step runs only while the keeper has not found
// the lease lost, and a pass that lost it stores nothing more (a copy
// admitted beside its members would be one more member on every failed
// pass, until a pass succeeds and folds it in).
func (c *Catalog) writeCompacted(ctx context.Context, k *leaseKeeper, store packstore.Store, table string, seg CompactedSegment) error {
	if err := k.alive(); err != nil {
		return fmt.Errorf("compacting %s: %w", table, err)
	}
	if err := store.Put(ctx, seg.Path, seg.Data); err != nil {
		return fmt.Errorf("compacting %s: %w", table, err)
	}
	if compactBeforeIndex != nil {
		compactBeforeIndex()
	}
	ref, err := c.ReadRef(ctx, store, seg.Path)
	if err != nil {
		return fmt.Errorf("compacting %s: %w", table, err)
	}
	if err := k.alive(); err != nil {
		return fmt.Errorf("compacting %s: %w", table, err)
	}
	if _, err := c.Index(ctx, store, []PackRef{ref}); err != nil {
		return fmt.Errorf("compacting %s: %w", table, err)
	}
	return nil
}

// leaseKeeper renews a lease in the background (keepLease) while its
// holder runs work that does not touch it.
type leaseKeeper struct {
	cancel context.CancelFunc
	done   chan struct{}
	lost   atomic.Bool // a renewal found the lease lost (readable any time)
	l      Lease       // the lease as the last renewal left it; read after done
	err    error       // the renewal that failed (ErrLeaseLost: lost); after done
}

// keepLease renews l (fenced, RenewLease) every ttl/3 until stop. Only one
// goroutine may use the lease meanwhile: the caller must not renew it or
// publish with it before stop. A renewal that fails transiently is tried
// again at the next tick; one that finds the lease lost ends the keeping.
func (c *Catalog) keepLease(ctx context.Context, l Lease, ttl time.Duration) *leaseKeeper {
	kctx, cancel := context.WithCancel(ctx)
	k := &leaseKeeper{cancel: cancel, done: make(chan struct{}), l: l}
	go func() {
		defer close(k.done)
		tick := time.NewTicker(max(ttl/3, time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-kctx.Done():
				return
			case <-tick.C:
			}
			nl, err := c.RenewLease(kctx, k.l, ttl)
			switch {
			case err == nil:
				k.l, k.err = nl, nil
			case kctx.Err() != nil:
				return
			case errors.Is(err, ErrLeaseLost):
				k.err = err
				k.lost.Store(true)
				return
			default:
				k.err = err // transient: the next tick tries again
			}
		}
	}()
	return k
}

// alive is ErrLeaseLost once a renewal found the lease lost, else nil.
func (k *leaseKeeper) alive() error {
	if k.lost.Load() {
		return fmt.Errorf("%w: a renewal during the pass found it gone", ErrLeaseLost)
	}
	return nil
}

// stop ends the keeping, waiting for a renewal in flight, and returns the
// lease and, when the lease was lost, why. It may be called again.
func (k *leaseKeeper) stop() (Lease, error) {
	k.cancel()
	<-k.done
	if errors.Is(k.err, ErrLeaseLost) {
		return k.l, k.err
	}
	return k.l, nil
}

// maxRemovalsPerPublish bounds the members one PublishReplace removes (a
// variable so a test can lower it).
var maxRemovalsPerPublish = 500

// Test hooks of the crash tests (nil in production): they run after the
// compacted segment is stored and before the replacement is published.
var compactBeforeIndex, compactBeforePublish func()

// packPaths returns the path and bytes of each pack of store.
func (c *Catalog) packPaths(ctx context.Context, storeID string, packs map[string]bool) (map[string]string, map[string]int64, error) {
	paths, sizes := map[string]string{}, map[string]int64{}
	ids := make([]string, 0, len(packs))
	for id := range packs {
		ids = append(ids, quote(id))
	}
	sort.Strings(ids)
	for start := 0; start < len(ids); start += 1000 {
		chunk := ids[start:min(start+1000, len(ids))]
		res, err := c.conn.Query(ctx, "SELECT pack_id, any(path), any(bytes) FROM "+ident(c.n.packs())+" WHERE store_id = "+quote(storeID)+" AND pack_id IN ("+strings.Join(chunk, ", ")+") GROUP BY pack_id")
		if err != nil {
			return nil, nil, fmt.Errorf("reading pack paths: %w", err)
		}
		for _, r := range res.Rows {
			paths[asString(r[0])] = asString(r[1])
			sizes[asString(r[0])] = asInt(r[2])
		}
	}
	for id := range packs {
		if paths[id] == "" {
			return nil, nil, fmt.Errorf("reading pack paths: pack %s of store %s has no inventory row", id, storeID)
		}
	}
	return paths, sizes, nil
}
