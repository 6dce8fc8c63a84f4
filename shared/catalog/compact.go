package catalog

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

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

// decodedMember is a member file read and decoded once for every
// destination a compaction takes from it (a segment holds up to hundreds),
// with its segment entries by destination.
type decodedMember struct {
	meta    packstore.PackMeta
	recs    []arrow.RecordBatch
	entries map[string]proto.SegmentEntry
}

func decodeMember(ctx context.Context, store packstore.Store, path string) (*decodedMember, error) {
	data, err := store.Get(ctx, path)
	if err != nil {
		return nil, err
	}
	meta, recs, err := packstore.DecodePack(data, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	d := &decodedMember{meta: meta, recs: recs}
	if meta.IsSegment() {
		entries, err := meta.Entries()
		if err != nil {
			d.release()
			return nil, err
		}
		d.entries = make(map[string]proto.SegmentEntry, len(entries))
		for _, e := range entries {
			d.entries[e.Destination] = e
		}
	}
	return d, nil
}

func (d *decodedMember) release() {
	for _, r := range d.recs {
		r.Release()
	}
}

// destinationRecs returns the batches of one destination of a decoded pack:
// a per-destination pack's batches as they are; a segment's rows
// [Lo, Lo+Rows) of the destination's entry, without proto.ColDestination.
// The caller releases the result.
func destinationRecs(d *decodedMember, dest string) ([]arrow.RecordBatch, error) {
	meta, recs := d.meta, d.recs
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
	e, ok := d.entries[dest]
	if !ok {
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
// fingerprint fp. A file is read and decoded once however many of the
// inputs' destinations it holds (a segment is a member of each).
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
	decoded := map[string]*decodedMember{}
	for _, in := range ins {
		ds := destSrc{dest: in.Destination}
		for _, p := range in.Paths {
			d := decoded[p]
			if d == nil {
				var err error
				if d, err = decodeMember(ctx, store, p); err != nil {
					err = fmt.Errorf("compacting %s: reading member %s: %w", table, p, err)
					if errors.Is(err, packstore.ErrCorruptPack) || errors.Is(err, packstore.ErrNotFound) {
						err = &damagedFileError{path: p, err: err}
					}
					return out, err
				}
				decoded[p] = d
				release = append(release, d.recs...)
			}
			meta, recs := d.meta, d.recs
			if meta.Table != table || meta.Schema != fp {
				return out, fmt.Errorf("compacting %s: member %s is of table %s schema %s, not schema %s", table, p, meta.Table, meta.Schema, fp)
			}
			dr, err := destinationRecs(d, in.Destination)
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
