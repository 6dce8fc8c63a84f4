package packstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
)

// SegmentPart is one destination's resolved rows in a segment: recs of one
// schema, without proto.ColDestination (EncodeSegment adds it).
type SegmentPart struct {
	Destination string
	Recs        []arrow.RecordBatch
}

// SegmentMeta names a segment. Schema is the fingerprint of the parts' rows
// (without proto.ColDestination), as a per-destination pack's is.
type SegmentMeta struct {
	PackID, StoreID, Table, Schema string
}

// Path is the segment's store-relative path (proto.SegmentPath), or "" when
// the pack id names no time (EncodeSegment refuses such an id).
func (m SegmentMeta) Path() string {
	p, err := proto.SegmentPath(m.PackID, m.Table)
	if err != nil {
		return ""
	}
	return p
}

// segmentDestinationType is the type of proto.ColDestination in a segment.
// Plain utf8: ClickHouse's Arrow reader copies it into a String column
// directly, with no dictionary to decode, and above CompressMinBytes zstd
// takes the repetition away on disk.
var segmentDestinationType = arrow.BinaryTypes.String

// EncodeSegment writes parts as one segment: an Arrow IPC file of format
// proto.SegmentFormatVersion holding every part's rows grouped by
// destination (parts sorted by name), each row carrying its destination in
// proto.ColDestination (the last column), compressed as EncodePack
// compresses. The footer carries the pack keys (MetaPackDestination empty;
// rows, tombstones, first and last over the whole file) plus
// proto.MetaPackDestinations: the returned entries, as JSON, in row order.
// Every part must have rows; two parts of one destination are refused.
func EncodeSegment(parts []SegmentPart, meta SegmentMeta) (data []byte, entries []proto.SegmentEntry, err error) {
	pm := PackMeta{PackID: meta.PackID, StoreID: meta.StoreID, Table: meta.Table, Schema: meta.Schema}
	if len(parts) == 0 {
		return nil, nil, fmt.Errorf("encoding segment: %w: no parts", ErrBadPackMeta)
	}
	if err := pm.validateIdentity(true); err != nil {
		return nil, nil, fmt.Errorf("encoding segment: %w", err)
	}
	sorted := append([]SegmentPart(nil), parts...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Destination < sorted[j].Destination })
	var all []arrow.RecordBatch
	var base *arrow.Schema
	var total summary
	for i, p := range sorted {
		if err := proto.ValidateDestination(p.Destination); err != nil {
			return nil, nil, fmt.Errorf("encoding segment %s: %w: %v", meta.PackID, ErrBadPackMeta, err)
		}
		if i > 0 && sorted[i-1].Destination == p.Destination {
			return nil, nil, fmt.Errorf("encoding segment %s: %w: two parts of destination %s", meta.PackID, ErrBadPackMeta, p.Destination)
		}
		for _, r := range p.Recs {
			if base == nil {
				base = r.Schema()
				if len(base.FieldIndices(proto.ColDestination)) > 0 {
					return nil, nil, fmt.Errorf("encoding segment %s: %w: rows already carry %s", meta.PackID, ErrBadPackMeta, proto.ColDestination)
				}
			} else if !r.Schema().Equal(base) {
				return nil, nil, fmt.Errorf("encoding segment %s: %w: batches have different schemas", meta.PackID, ErrBadPackMeta)
			}
		}
		s, err := summarize(p.Recs)
		if err != nil {
			return nil, nil, fmt.Errorf("encoding segment %s: destination %s: %w", meta.PackID, p.Destination, err)
		}
		if s.rows == 0 {
			return nil, nil, fmt.Errorf("encoding segment %s: %w: destination %s has no rows", meta.PackID, ErrBadPackMeta, p.Destination)
		}
		entries = append(entries, proto.SegmentEntry{
			Destination: p.Destination, Lo: total.rows, Rows: s.rows, Tombstones: s.tombstones,
			First: s.first.String(), Last: s.last.String(),
		})
		total.merge(s)
		all = append(all, p.Recs...)
	}
	index, err := json.Marshal(entries)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding segment %s: %w", meta.PackID, err)
	}

	keys, vals := tableMetadata(base)
	for _, kv := range [][2]string{
		{proto.MetaPackFormat, proto.SegmentFormatVersion},
		{proto.MetaPackID, meta.PackID},
		{proto.MetaPackStoreID, meta.StoreID},
		{proto.MetaPackDestination, ""},
		{proto.MetaPackTable, meta.Table},
		{proto.MetaPackSchema, meta.Schema},
		{proto.MetaPackFirst, total.first.String()},
		{proto.MetaPackLast, total.last.String()},
		{proto.MetaPackRows, strconv.FormatInt(total.rows, 10)},
		{proto.MetaPackTombstones, strconv.FormatInt(total.tombstones, 10)},
		{proto.MetaPackDestinations, string(index)},
	} {
		keys = append(keys, kv[0])
		vals = append(vals, kv[1])
	}
	recs := all
	if withNulls, ok := nullArrays(all); ok {
		recs = withNulls
		defer func() {
			for _, r := range withNulls {
				r.Release()
			}
		}()
	}
	md := arrow.NewMetadata(keys, vals)
	fields := append(append([]arrow.Field{}, recs[0].Schema().Fields()...),
		arrow.Field{Name: proto.ColDestination, Type: segmentDestinationType})
	schema := arrow.NewSchema(fields, &md)

	var buf bytes.Buffer
	w, err := newFileWriter(&buf, schema, recs)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding segment %s: %w", meta.PackID, err)
	}
	// The parts' batches are written joined into batches of about
	// segmentBatchBytes: a reader's cost is per batch (ClickHouse sets up
	// each batch's buffers and decompression on its own), and a segment of
	// 1,000 destinations of a few rows each is 1,000 tiny batches
	// otherwise.
	var group []destRec
	gbytes := 0
	emit := func() error {
		if len(group) == 0 {
			return nil
		}
		rec, err := joinWithDestination(schema, group)
		group, gbytes = group[:0], 0
		if err != nil {
			return err
		}
		defer rec.Release()
		return w.Write(rec)
	}
	k := 0 // index into recs, which follow sorted's parts in order
	for _, p := range sorted {
		for range p.Recs {
			r := recs[k]
			k++
			if r.NumRows() == 0 {
				continue
			}
			group = append(group, destRec{r, p.Destination})
			if gbytes += bodyBytes([]arrow.RecordBatch{r}); gbytes >= segmentBatchBytes {
				if err := emit(); err != nil {
					_ = w.Close()
					return nil, nil, fmt.Errorf("encoding segment %s: %w", meta.PackID, err)
				}
			}
		}
	}
	if err := emit(); err != nil {
		_ = w.Close()
		return nil, nil, fmt.Errorf("encoding segment %s: %w", meta.PackID, err)
	}
	if err := w.Close(); err != nil {
		return nil, nil, fmt.Errorf("encoding segment %s: %w", meta.PackID, err)
	}
	return buf.Bytes(), entries, nil
}

// segmentBatchBytes is about the column data of one batch of a segment (a
// variable so that a test can lower it).
var segmentBatchBytes = 4 << 20

// destRec is a batch of one destination's rows.
type destRec struct {
	rec  arrow.RecordBatch
	dest string
}

// joinWithDestination joins group's batches (one schema) into one batch of
// schema: their columns concatenated, and proto.ColDestination naming each
// row's destination appended.
func joinWithDestination(schema *arrow.Schema, group []destRec) (arrow.RecordBatch, error) {
	mem := memory.DefaultAllocator
	ncols := int(group[0].rec.NumCols())
	cols := make([]arrow.Array, 0, ncols+1)
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	var n int64
	for _, g := range group {
		n += g.rec.NumRows()
	}
	for i := 0; i < ncols; i++ {
		if len(group) == 1 {
			c := group[0].rec.Column(i)
			c.Retain()
			cols = append(cols, c)
			continue
		}
		parts := make([]arrow.Array, len(group))
		for j, g := range group {
			parts[j] = g.rec.Column(i)
		}
		c, err := array.Concatenate(parts, mem)
		if err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	b := array.NewStringBuilder(mem)
	defer b.Release()
	b.Reserve(int(n))
	for _, g := range group {
		b.ReserveData(int(g.rec.NumRows()) * len(g.dest))
		for i := int64(0); i < g.rec.NumRows(); i++ {
			b.Append(g.dest)
		}
	}
	cols = append(cols, b.NewArray())
	return array.NewRecordBatch(schema, cols, n), nil
}

// tableMetadata is s's schema metadata without the pack keys.
func tableMetadata(s *arrow.Schema) (keys, vals []string) {
	if md := s.Metadata(); md.Len() > 0 {
		for i, k := range md.Keys() {
			if strings.HasPrefix(k, "sluice.pack.") {
				continue
			}
			keys = append(keys, k)
			vals = append(vals, md.Values()[i])
		}
	}
	return keys, vals
}

// parseSegmentIndex reads and checks a segment footer's destination index
// against the footer's totals: entries sorted by valid, distinct names,
// each with rows, their ranges contiguous from row 0 and covering every
// row, their rows and tombstones summing to the footer's, their positions
// parseable and within the footer's first and last.
func parseSegmentIndex(m PackMeta, raw string) ([]proto.SegmentEntry, error) {
	var entries []proto.SegmentEntry
	if err := json.Unmarshal([]byte(raw), &entries); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorruptPack, proto.MetaPackDestinations, err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: segment lists no destinations", ErrCorruptPack)
	}
	var at, tombs int64
	for i, e := range entries {
		if err := proto.ValidateDestination(e.Destination); err != nil {
			return nil, fmt.Errorf("%w: segment entry %d: %v", ErrCorruptPack, i, err)
		}
		if i > 0 && entries[i-1].Destination >= e.Destination {
			return nil, fmt.Errorf("%w: segment entries not sorted by destination (%s after %s)", ErrCorruptPack, e.Destination, entries[i-1].Destination)
		}
		if e.Lo != at || e.Rows <= 0 || e.Tombstones < 0 || e.Tombstones > e.Rows {
			return nil, fmt.Errorf("%w: segment entry %s: rows [%d, +%d) tombstones %d, want rows from %d", ErrCorruptPack, e.Destination, e.Lo, e.Rows, e.Tombstones, at)
		}
		first, err1 := proto.ParsePosition(e.First)
		last, err2 := proto.ParsePosition(e.Last)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: segment entry %s: positions %q, %q", ErrCorruptPack, e.Destination, e.First, e.Last)
		}
		if last.Less(first) || first.Less(m.First) || m.Last.Less(last) {
			return nil, fmt.Errorf("%w: segment entry %s: positions %s..%s outside the file's %s..%s", ErrCorruptPack, e.Destination, first, last, m.First, m.Last)
		}
		at += e.Rows
		tombs += e.Tombstones
	}
	if at != m.Rows || tombs != m.Tombstones {
		return nil, fmt.Errorf("%w: segment entries hold %d rows, %d tombstones; the footer says %d, %d", ErrCorruptPack, at, tombs, m.Rows, m.Tombstones)
	}
	return entries, nil
}

// segmentCheck checks a segment's rows against its entries as the batches
// are read: each row's proto.ColDestination is its entry's destination,
// and each entry's rows, tombstones, first and last are its rows'.
type segmentCheck struct {
	entries []proto.SegmentEntry
	k       int   // current entry
	row     int64 // rows seen
	cur     summary
}

func (c *segmentCheck) add(rec arrow.RecordBatch) error {
	sc := rec.Schema()
	di := sc.FieldIndices(proto.ColDestination)
	if len(di) != 1 {
		return fmt.Errorf("segment batch has %d %s columns, want 1", len(di), proto.ColDestination)
	}
	dest, ok := rec.Column(di[0]).(*array.String)
	if !ok {
		return fmt.Errorf("%s is %s, want utf8", proto.ColDestination, rec.Column(di[0]).DataType())
	}
	op := rec.Column(sc.FieldIndices(proto.ColOp)[0]).(*array.Int8) // summary.add checked them
	lsn := rec.Column(sc.FieldIndices(proto.ColLSN)[0]).(*array.Uint64)
	seq := rec.Column(sc.FieldIndices(proto.ColSeq)[0]).(*array.Uint64)
	n := int(rec.NumRows())
	for i := 0; i < n; i++ {
		for c.k < len(c.entries) && c.row >= c.entries[c.k].Lo+c.entries[c.k].Rows {
			if err := c.close(); err != nil {
				return err
			}
		}
		if c.k == len(c.entries) {
			return fmt.Errorf("row %d is past every segment entry", c.row)
		}
		e := c.entries[c.k]
		if !dest.IsValid(i) || dest.Value(i) != e.Destination {
			return fmt.Errorf("row %d has %s %q, its entry says %q", c.row, proto.ColDestination, dest.Value(i), e.Destination)
		}
		c.cur.addRow(proto.Position{LSN: proto.LSN(lsn.Value(i)), Seq: seq.Value(i)}, proto.IsTombstone(op.Value(i)))
		c.row++
	}
	return nil
}

// close checks the current entry against its rows and moves to the next.
func (c *segmentCheck) close() error {
	e := c.entries[c.k]
	s := c.cur
	if s.rows != e.Rows || s.tombstones != e.Tombstones || s.first.String() != e.First || s.last.String() != e.Last {
		return fmt.Errorf("segment entry %s says rows %d, tombstones %d, %s..%s; its rows say %d, %d, %s..%s",
			e.Destination, e.Rows, e.Tombstones, e.First, e.Last, s.rows, s.tombstones, s.first, s.last)
	}
	c.k++
	c.cur = summary{}
	return nil
}

// finish checks the last entry; the footer's totals (checked against the
// entries) already bound the row count.
func (c *segmentCheck) finish() error {
	for c.k < len(c.entries) {
		if err := c.close(); err != nil {
			return err
		}
	}
	return nil
}
