package catalog

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// Compaction rewrites every member of a (destination, table) at the latest
// snapshot into one segment that keeps, per key, exactly the rows a read
// resolves from: the winner (newest by (lsn, seq, store, pack), tombstone
// or not) and, for each TOAST-able column, the newest row that carried a
// value of it (the argMaxIf candidate of resolution). Those rows are kept
// verbatim, with their own positions, unchanged markers and NULL markers,
// so every aggregate of resolution has the same value over the compacted
// rows as over the members they replace, and stays so whatever is admitted
// later: argMax over (members ∪ later) is argMax(argMax(members), later),
// and the same for each argMaxIf. That is why compaction takes ALL members
// of a (destination, table), never a subset, and why it may keep
// tombstones (a tombstone winner is a row like any other; see ADR 0023 for
// why it is never dropped).

// compactWinnersOnly keeps only each key's winner: a test knob that
// switches TOAST carry-forward off in compaction (negative control).
var compactWinnersOnly bool

// compactSource is one member's rows of one destination: the batches,
// already cut to the destination's slice of a segment and without
// proto.ColDestination, with the member's identity (the tie-breaker of
// resolution's order).
type compactSource struct {
	store, pack string
	recs        []arrow.RecordBatch
}

// rowRef is one row of a compactSource batch.
type rowRef struct {
	src, rec, row int
}

// rowPos is a row's place in resolution's order.
type rowPos struct {
	lsn, seq    uint64
	store, pack string
}

func (a rowPos) less(b rowPos) bool {
	if a.lsn != b.lsn {
		return a.lsn < b.lsn
	}
	if a.seq != b.seq {
		return a.seq < b.seq
	}
	if a.store != b.store {
		return a.store < b.store
	}
	return a.pack < b.pack
}

// keyState is what compaction keeps of one key while it scans: the winner
// and, per TOAST-able column, the newest row that carried a value.
type keyState struct {
	win    rowRef
	winPos rowPos
	// carry[2*i] is column i's newest row not marked unchanged, and
	// carry[2*i+1] its newest such row with a non-NULL value: ClickHouse's
	// argMaxIf skips NULL values of a Nullable column, while the array
	// columns (never NULL in the rows table) and the NULL markers' argMaxIf
	// take the first. Keeping both is a superset of what either needs, and
	// a superset of the candidates changes no argMax(If): every extra row
	// is older than the winner it competes with.
	carry   []rowRef
	carryAt []rowPos
	has     []bool
}

// selectCompacted returns the rows of srcs a read resolves from (see the
// comment at the top of this file) as slices of the source batches, in
// source order. ti names the key and the TOAST-able columns.
func selectCompacted(ti TableInfo, srcs []compactSource) ([]arrow.RecordBatch, error) {
	var toast []string
	for _, col := range ti.Columns {
		if !ti.isKey(col.Name) && toastable(col.Kind) {
			toast = append(toast, col.Name)
		}
	}
	keys := map[string]*keyState{}
	var order []string
	for si, s := range srcs {
		for ri, rec := range s.recs {
			sc := rec.Schema()
			idx := func(name string) int {
				if f := sc.FieldIndices(name); len(f) == 1 {
					return f[0]
				}
				return -1
			}
			keyCols := make([]arrow.Array, len(ti.PrimaryKey))
			for i, k := range ti.PrimaryKey {
				j := idx(k)
				if j < 0 {
					return nil, fmt.Errorf("compacting %s: pack %s has no key column %s", ti.Name, s.pack, k)
				}
				keyCols[i] = rec.Column(j)
			}
			toastCols := make([]arrow.Array, len(toast))
			for i, col := range toast {
				j := idx(col)
				if j < 0 {
					return nil, fmt.Errorf("compacting %s: pack %s has no column %s", ti.Name, s.pack, col)
				}
				toastCols[i] = rec.Column(j)
			}
			li, qi := idx(proto.ColLSN), idx(proto.ColSeq)
			if li < 0 || qi < 0 {
				return nil, fmt.Errorf("compacting %s: pack %s lacks %s or %s", ti.Name, s.pack, proto.ColLSN, proto.ColSeq)
			}
			lsns, ok1 := rec.Column(li).(*array.Uint64)
			seqs, ok2 := rec.Column(qi).(*array.Uint64)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("compacting %s: pack %s: positions are not UInt64", ti.Name, s.pack)
			}
			var unch *array.List
			if ui := idx(proto.ColUnchanged); ui >= 0 {
				unch, _ = rec.Column(ui).(*array.List)
			}
			var b strings.Builder
			for row := 0; row < int(rec.NumRows()); row++ {
				b.Reset()
				for _, kc := range keyCols {
					b.WriteString(kc.ValueStr(row))
					b.WriteByte(0)
				}
				k := b.String()
				ref := rowRef{si, ri, row}
				pos := rowPos{lsns.Value(row), seqs.Value(row), s.store, s.pack}
				st := keys[k]
				if st == nil {
					st = &keyState{win: ref, winPos: pos, carry: make([]rowRef, 2*len(toast)), carryAt: make([]rowPos, 2*len(toast)), has: make([]bool, 2*len(toast))}
					keys[k] = st
					order = append(order, k)
				} else if st.winPos.less(pos) {
					st.win, st.winPos = ref, pos
				}
				var unchanged map[string]bool
				if unch != nil && !unch.IsNull(row) {
					lo, hi := unch.ValueOffsets(row)
					vals, _ := unch.ListValues().(*array.String)
					for j := lo; j < hi && vals != nil; j++ {
						if !vals.IsNull(int(j)) {
							if unchanged == nil {
								unchanged = map[string]bool{}
							}
							unchanged[vals.Value(int(j))] = true
						}
					}
				}
				for ci, col := range toast {
					if unchanged[col] {
						continue
					}
					for _, j := range []int{2 * ci, 2*ci + 1} {
						if j == 2*ci+1 && toastCols[ci].IsNull(row) {
							continue
						}
						if !st.has[j] || st.carryAt[j].less(pos) {
							st.carry[j], st.carryAt[j], st.has[j] = ref, pos, true
						}
					}
				}
			}
		}
	}
	keep := map[rowRef]bool{}
	for _, k := range order {
		st := keys[k]
		keep[st.win] = true
		for j := range st.carry {
			if compactWinnersOnly {
				break
			}
			if st.has[j] {
				keep[st.carry[j]] = true
			}
		}
	}
	refs := make([]rowRef, 0, len(keep))
	for r := range keep {
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool {
		a, b := refs[i], refs[j]
		if a.src != b.src {
			return a.src < b.src
		}
		if a.rec != b.rec {
			return a.rec < b.rec
		}
		return a.row < b.row
	})
	// Runs of consecutive rows of one batch become one slice.
	var out []arrow.RecordBatch
	for i := 0; i < len(refs); {
		j := i + 1
		for j < len(refs) && refs[j].src == refs[i].src && refs[j].rec == refs[i].rec && refs[j].row == refs[j-1].row+1 {
			j++
		}
		r := refs[i]
		out = append(out, srcs[r.src].recs[r.rec].NewSlice(int64(r.row), int64(refs[j-1].row+1)))
		i = j
	}
	return out, nil
}

// optionalSystem are the system columns a pack may lack; compaction gives
// every batch all of them (an absent list is an empty one, an absent commit
// time NULL), so batches of packs that differ only in them share a schema.
var optionalSystem = []string{proto.ColUnchanged, proto.ColNulls, proto.ColCommitTime}

// normalizeSchema returns the schema every batch of recs is rebuilt to: the
// first batch's fields and metadata plus the optional system columns it
// lacks. Batches whose other columns differ are refused (compaction groups
// by schema fingerprint, so they do not occur).
func normalizeSchema(recs []arrow.RecordBatch) (*arrow.Schema, error) {
	base := recs[0].Schema()
	fields := append([]arrow.Field{}, base.Fields()...)
	types := map[string]arrow.DataType{
		proto.ColUnchanged:  arrow.ListOf(arrow.BinaryTypes.String),
		proto.ColNulls:      arrow.ListOf(arrow.BinaryTypes.String),
		proto.ColCommitTime: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"},
	}
	for _, name := range optionalSystem {
		if len(base.FieldIndices(name)) == 0 {
			fields = append(fields, arrow.Field{Name: name, Type: types[name], Nullable: name == proto.ColCommitTime})
		}
	}
	md := base.Metadata()
	target := arrow.NewSchema(fields, &md)
	for _, r := range recs[1:] {
		for _, f := range r.Schema().Fields() {
			j := target.FieldIndices(f.Name)
			if len(j) != 1 || !arrow.TypeEqual(target.Field(j[0]).Type, f.Type) {
				return nil, fmt.Errorf("%w: batches to compact differ in column %s", ErrBadSchema, f.Name)
			}
		}
		for _, f := range fields {
			if !proto.IsSystemColumn(f.Name) && len(r.Schema().FieldIndices(f.Name)) == 0 {
				return nil, fmt.Errorf("%w: batches to compact differ in column %s", ErrBadSchema, f.Name)
			}
		}
	}
	return target, nil
}

// conform rebuilds rec with target's schema (columns by name; an absent
// optional system column filled as normalizeSchema says). The caller
// releases the result.
func conform(rec arrow.RecordBatch, target *arrow.Schema) arrow.RecordBatch {
	n := int(rec.NumRows())
	cols := make([]arrow.Array, len(target.Fields()))
	var made []arrow.Array
	for i, f := range target.Fields() {
		if j := rec.Schema().FieldIndices(f.Name); len(j) == 1 {
			cols[i] = rec.Column(j[0])
			continue
		}
		b := array.NewBuilder(memory.DefaultAllocator, f.Type)
		for range n {
			if lb, ok := b.(*array.ListBuilder); ok {
				lb.Append(true) // an empty list
			} else {
				b.AppendNull()
			}
		}
		cols[i] = b.NewArray()
		b.Release()
		made = append(made, cols[i])
	}
	out := array.NewRecordBatch(target, cols, int64(n))
	for _, a := range made {
		a.Release()
	}
	return out
}

// destinationRecs returns the batches of one destination of a decoded pack:
// a per-destination pack's batches as they are; a segment's rows
// [Lo, Lo+Rows) of the destination's entry, without proto.ColDestination.
// The caller releases the result.
func destinationRecs(meta packstore.PackMeta, recs []arrow.RecordBatch, dest string) ([]arrow.RecordBatch, error) {
	if !meta.IsSegment() {
		if meta.Destination != dest {
			return nil, fmt.Errorf("pack %s is of destination %s, not %s", meta.PackID, meta.Destination, dest)
		}
		out := make([]arrow.RecordBatch, len(recs))
		for i, r := range recs {
			r.Retain()
			out[i] = r
		}
		return out, nil
	}
	entries, err := meta.Entries()
	if err != nil {
		return nil, err
	}
	var e *proto.SegmentEntry
	for i := range entries {
		if entries[i].Destination == dest {
			e = &entries[i]
		}
	}
	if e == nil {
		return nil, fmt.Errorf("segment %s holds no rows of destination %s", meta.PackID, dest)
	}
	lo, hi := e.Lo, e.Lo+e.Rows
	var out []arrow.RecordBatch
	var at int64
	for _, r := range recs {
		n := r.NumRows()
		s, t := max(lo, at), min(hi, at+n)
		at += n
		if s >= t {
			continue
		}
		sl := r.NewSlice(s-(at-n), t-(at-n))
		sc := sl.Schema()
		di := sc.FieldIndices(proto.ColDestination)
		if len(di) != 1 {
			sl.Release()
			return nil, fmt.Errorf("segment %s has no %s column", meta.PackID, proto.ColDestination)
		}
		fields := append(append([]arrow.Field{}, sc.Fields()[:di[0]]...), sc.Fields()[di[0]+1:]...)
		cols := append(append([]arrow.Array{}, sl.Columns()[:di[0]]...), sl.Columns()[di[0]+1:]...)
		md := sc.Metadata()
		out = append(out, array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, sl.NumRows()))
		sl.Release()
	}
	return out, nil
}

// CompactInput is one (destination, table)'s members to compact, each the
// store path of its file.
type CompactInput struct {
	Destination string
	Paths       []string // the member files (packs or segments) in store
}

// CompactedSegment is a compaction's output before it is stored.
type CompactedSegment struct {
	Path    string
	Data    []byte
	Entries []proto.SegmentEntry
	// InRows and OutRows count the member rows read and the rows kept.
	InRows, OutRows int64
}

// buildCompacted reads every member of each input from store, keeps what
// selectCompacted keeps and encodes it as one segment of table named
// packID (a proto.SegmentID). Every member must share the schema
// fingerprint fp.
func buildCompacted(ctx context.Context, store packstore.Store, table, fp, packID string, ins []CompactInput) (CompactedSegment, error) {
	var out CompactedSegment
	var release []arrow.RecordBatch
	defer func() {
		for _, r := range release {
			r.Release()
		}
	}()
	type destSrc struct {
		dest string
		srcs []compactSource
	}
	var all []destSrc
	var ti TableInfo
	var flat []arrow.RecordBatch
	for _, in := range ins {
		ds := destSrc{dest: in.Destination}
		for _, p := range in.Paths {
			data, err := store.Get(ctx, p)
			if err != nil {
				return out, fmt.Errorf("compacting %s: %w", table, err)
			}
			meta, recs, err := packstore.DecodePack(data, memory.DefaultAllocator)
			if err != nil {
				return out, fmt.Errorf("compacting %s: %w", table, err)
			}
			release = append(release, recs...)
			if meta.Table != table || meta.Schema != fp {
				return out, fmt.Errorf("compacting %s: member %s is of table %s schema %s, not schema %s", table, p, meta.Table, meta.Schema, fp)
			}
			dr, err := destinationRecs(meta, recs, in.Destination)
			if err != nil {
				return out, fmt.Errorf("compacting %s: %w", table, err)
			}
			release = append(release, dr...)
			if ti.Name == "" && len(recs) > 0 {
				if ti, err = TableInfoFromSchema(table, recs[0].Schema(), fp); err != nil {
					return out, fmt.Errorf("compacting %s: %w", table, err)
				}
			}
			for _, r := range dr {
				out.InRows += r.NumRows()
			}
			flat = append(flat, dr...)
			ds.srcs = append(ds.srcs, compactSource{store: store.ID(), pack: meta.PackID, recs: dr})
		}
		all = append(all, ds)
	}
	if len(flat) == 0 {
		return out, fmt.Errorf("compacting %s: no rows", table)
	}
	target, err := normalizeSchema(flat)
	if err != nil {
		return out, fmt.Errorf("compacting %s: %w", table, err)
	}
	var parts []packstore.SegmentPart
	for _, ds := range all {
		kept, err := selectCompacted(ti, ds.srcs)
		if err != nil {
			return out, err
		}
		release = append(release, kept...)
		part := packstore.SegmentPart{Destination: ds.dest}
		for _, r := range kept {
			c := conform(r, target)
			release = append(release, c)
			part.Recs = append(part.Recs, c)
			out.OutRows += c.NumRows()
		}
		if len(part.Recs) > 0 {
			parts = append(parts, part)
		}
	}
	meta := packstore.SegmentMeta{PackID: packID, StoreID: store.ID(), Table: table, Schema: fp}
	out.Data, out.Entries, err = packstore.EncodeSegment(parts, meta)
	if err != nil {
		return out, fmt.Errorf("compacting %s: %w", table, err)
	}
	out.Path = meta.Path()
	return out, nil
}

// CompactPolicy is catalog.compact_min_packs, catalog.compact_small_bytes
// and catalog.compact_max_bytes.
type CompactPolicy struct {
	// MinPacks: a (destination, table) with at least this many members is
	// compacted.
	MinPacks int
	// SmallBytes: a member smaller than this is small; a (destination,
	// table) with at least two members whose small members add up to
	// SmallBytes is compacted too.
	SmallBytes int64
	// MaxBytes bounds the member bytes one pass reads (at least one
	// destination is taken whatever its size), so a pass never holds the
	// engine and the publisher long.
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
}

// compactCandidate is one (destination, table) a trigger chose.
type compactCandidate struct {
	table, fingerprint, destination string
	members                         int
	bytes                           int64
}

// compactCandidates returns the (destination, table)s of the latest
// snapshot v that a trigger of p chose, whose members are all in store and
// of one schema fingerprint (compaction takes every member or none).
func (c *Catalog) compactCandidates(ctx context.Context, v uint64, storeID string, p CompactPolicy, destination string) ([]compactCandidate, error) {
	hw, err := c.highWater(ctx, v)
	if err != nil {
		return nil, err
	}
	q := fmt.Sprintf(`SELECT table, any(fingerprint), destination, count(), sum(b), sumIf(b, b < %[4]d), uniqExact(fingerprint), countIf(store_id != %[3]s)
		FROM (SELECT store_id, pack_id, destination, any(table) AS table, any(fingerprint) AS fingerprint, any(bytes) AS b FROM %[1]s WHERE %[2]s GROUP BY store_id, pack_id, destination)
		GROUP BY table, destination
		HAVING uniqExact(fingerprint) = 1 AND countIf(store_id != %[3]s) = 0 AND (count() >= %[5]d OR (count() >= 2 AND sumIf(b, b < %[4]d) >= %[4]d))
		ORDER BY count() DESC, table, destination`,
		ident(c.n.packs()), c.memberRows(u64(v), u64(hw), destination, ""), quote(storeID), p.SmallBytes, p.MinPacks)
	if destination != "" { // a purge's rewrite: any member count
		q = strings.Replace(q, fmt.Sprintf("(count() >= %d OR", p.MinPacks), "(count() >= 1 OR", 1)
	}
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("choosing what to compact: %w", err)
	}
	var out []compactCandidate
	for _, r := range res.Rows {
		out = append(out, compactCandidate{table: asString(r[0]), fingerprint: asString(r[1]), destination: asString(r[2]), members: int(asUint(r[3])), bytes: asInt(r[4])})
	}
	return out, nil
}

// Compact runs one compaction pass: it picks the table with the largest
// (destination, table) a trigger of p chose, takes every chosen
// destination of that table and schema up to p.MaxBytes, writes their
// members at the latest snapshot as one segment (buildCompacted) into
// store, indexes it, and publishes the replacement (PublishReplace: the
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
	cands, err := c.compactCandidates(ctx, latest.Version, store.ID(), p, "")
	if err != nil || len(cands) == 0 {
		return CompactStats{}, l, err
	}
	first := cands[0]
	var chosen []string
	var bytes int64
	for _, cd := range cands {
		if cd.table != first.table || cd.fingerprint != first.fingerprint {
			continue
		}
		if len(chosen) > 0 && bytes+cd.bytes > p.MaxBytes {
			continue
		}
		chosen = append(chosen, cd.destination)
		bytes += cd.bytes
	}
	return c.compactDestinations(ctx, l, ttl, store, latest.Version, first.table, first.fingerprint, chosen, nil, nil, writer)
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
	if len(ins) > 0 {
		id := proto.SegmentID(time.Now(), writer, 0)
		seg, err := buildCompacted(ctx, store, table, fp, id, ins)
		if err != nil {
			return st, l, err
		}
		st.InRows, st.OutRows, st.OutBytes, st.Segment = seg.InRows, seg.OutRows, int64(len(seg.Data)), seg.Path
		// Reading and rewriting may take a good part of the lease's ttl:
		// renew it (fenced) before each step that follows, so that the
		// replacement publishes on a live lease.
		if l, err = c.RenewLease(ctx, l, ttl); err != nil {
			return st, l, fmt.Errorf("compacting %s: %w", table, err)
		}
		if err := store.Put(ctx, seg.Path, seg.Data); err != nil {
			return st, l, fmt.Errorf("compacting %s: %w", table, err)
		}
		if compactBeforeIndex != nil {
			compactBeforeIndex()
		}
		ref, err := c.ReadRef(ctx, store, seg.Path)
		if err != nil {
			return st, l, fmt.Errorf("compacting %s: %w", table, err)
		}
		if _, err := c.Index(ctx, store, []PackRef{ref}); err != nil {
			return st, l, fmt.Errorf("compacting %s: %w", table, err)
		}
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
