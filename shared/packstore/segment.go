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
// Every part must have rows; two parts of one destination are refused. It
// is EncodeSegmentBatch of the parts' rows concatenated.
func EncodeSegment(parts []SegmentPart, meta SegmentMeta) (data []byte, entries []proto.SegmentEntry, err error) {
	if len(parts) == 0 {
		return nil, nil, fmt.Errorf("encoding segment: %w: no parts", ErrBadPackMeta)
	}
	sorted := append([]SegmentPart(nil), parts...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Destination < sorted[j].Destination })
	var all []arrow.RecordBatch
	ranges := make([]SegmentRange, 0, len(sorted))
	for _, p := range sorted {
		var rows int64
		for _, r := range p.Recs {
			if !r.Schema().Equal(sorted[0].Recs[0].Schema()) {
				return nil, nil, fmt.Errorf("encoding segment %s: %w: batches have different schemas", meta.PackID, ErrBadPackMeta)
			}
			rows += r.NumRows()
		}
		ranges = append(ranges, SegmentRange{Destination: p.Destination, Rows: rows})
		all = append(all, p.Recs...)
	}
	if len(all) == 0 {
		return nil, nil, fmt.Errorf("encoding segment %s: %w: destination %s has no rows", meta.PackID, ErrBadPackMeta, sorted[0].Destination)
	}
	rec, err := concatBatches(all)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding segment %s: %w", meta.PackID, err)
	}
	defer rec.Release()
	return EncodeSegmentBatch(rec, ranges, meta)
}

// SegmentRange is one destination's rows in a segment batch: the next Rows
// rows after the ranges before it.
type SegmentRange struct {
	Destination string
	Rows        int64
}

// EncodeSegmentBatch writes rec as one segment (see EncodeSegment): its
// rows grouped by destination, ranges naming them in row order, sorted by
// name, distinct, each with rows, covering rec. rec has no
// proto.ColDestination (it is added). The flusher gathers a group
// commit's rows into one batch and calls this once per segment: nothing
// is done per destination but its footer entry.
func EncodeSegmentBatch(rec arrow.RecordBatch, ranges []SegmentRange, meta SegmentMeta) (data []byte, entries []proto.SegmentEntry, err error) {
	pm := PackMeta{PackID: meta.PackID, StoreID: meta.StoreID, Table: meta.Table, Schema: meta.Schema}
	if len(ranges) == 0 {
		return nil, nil, fmt.Errorf("encoding segment: %w: no parts", ErrBadPackMeta)
	}
	if err := pm.validateIdentity(true); err != nil {
		return nil, nil, fmt.Errorf("encoding segment: %w", err)
	}
	base := rec.Schema()
	if len(base.FieldIndices(proto.ColDestination)) > 0 {
		return nil, nil, fmt.Errorf("encoding segment %s: %w: rows already carry %s", meta.PackID, ErrBadPackMeta, proto.ColDestination)
	}
	cols, err := systemColumns(rec)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding segment %s: %w", meta.PackID, err)
	}
	var total summary
	entries = make([]proto.SegmentEntry, 0, len(ranges))
	for i, r := range ranges {
		if err := proto.ValidateDestination(r.Destination); err != nil {
			return nil, nil, fmt.Errorf("encoding segment %s: %w: %v", meta.PackID, ErrBadPackMeta, err)
		}
		if i > 0 && ranges[i-1].Destination >= r.Destination {
			if ranges[i-1].Destination == r.Destination {
				return nil, nil, fmt.Errorf("encoding segment %s: %w: two parts of destination %s", meta.PackID, ErrBadPackMeta, r.Destination)
			}
			return nil, nil, fmt.Errorf("encoding segment %s: %w: destinations %s, %s out of order", meta.PackID, ErrBadPackMeta, ranges[i-1].Destination, r.Destination)
		}
		if r.Rows <= 0 {
			return nil, nil, fmt.Errorf("encoding segment %s: %w: destination %s has no rows", meta.PackID, ErrBadPackMeta, r.Destination)
		}
		if total.rows+r.Rows > rec.NumRows() {
			return nil, nil, fmt.Errorf("encoding segment %s: %w: ranges hold more than the batch's %d rows", meta.PackID, ErrBadPackMeta, rec.NumRows())
		}
		var s summary
		cols.addRows(&s, total.rows, total.rows+r.Rows)
		entries = append(entries, proto.SegmentEntry{
			Destination: r.Destination, Lo: total.rows, Rows: s.rows, Tombstones: s.tombstones,
			First: s.first.String(), Last: s.last.String(),
		})
		total.merge(s)
	}
	if total.rows != rec.NumRows() {
		return nil, nil, fmt.Errorf("encoding segment %s: %w: ranges hold %d of the batch's %d rows", meta.PackID, ErrBadPackMeta, total.rows, rec.NumRows())
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
	keys, vals, placeholder := withChecksum(keys, vals)
	if withNulls, ok := nullArrays([]arrow.RecordBatch{rec}); ok {
		rec = withNulls[0]
		defer rec.Release()
	}
	md := arrow.NewMetadata(keys, vals)
	fields := append(append([]arrow.Field{}, rec.Schema().Fields()...),
		arrow.Field{Name: proto.ColDestination, Type: segmentDestinationType})
	schema := arrow.NewSchema(fields, &md)
	full, err := withDestinations(schema, rec, ranges)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding segment %s: %w", meta.PackID, err)
	}
	defer full.Release()

	var buf bytes.Buffer
	w, err := newFileWriter(&buf, schema, []arrow.RecordBatch{rec})
	if err != nil {
		return nil, nil, fmt.Errorf("encoding segment %s: %w", meta.PackID, err)
	}
	// Written in batches of about segmentBatchBytes: a reader's cost is
	// per batch (ClickHouse sets up each batch's buffers and decompression
	// on its own), and one batch of a whole large segment would be read
	// into memory at once.
	n := full.NumRows()
	step := n
	if b := int64(bodyBytes([]arrow.RecordBatch{full})); b > int64(segmentBatchBytes) {
		step = max(n*int64(segmentBatchBytes)/b, 1)
	}
	for lo := int64(0); lo < n; lo += step {
		part := full
		if lo > 0 || lo+step < n {
			part = full.NewSlice(lo, min(lo+step, n))
		}
		err := w.Write(part)
		if part != full {
			part.Release()
		}
		if err != nil {
			_ = w.Close()
			return nil, nil, fmt.Errorf("encoding segment %s: %w", meta.PackID, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, nil, fmt.Errorf("encoding segment %s: %w", meta.PackID, err)
	}
	if err := sealChecksum(buf.Bytes(), placeholder); err != nil {
		return nil, nil, fmt.Errorf("encoding segment %s: %w", meta.PackID, err)
	}
	return buf.Bytes(), entries, nil
}

// segmentBatchBytes is about the column data of one batch of a segment (a
// variable so that a test can lower it).
var segmentBatchBytes = 4 << 20

// concatBatches is recs (one schema) as one batch.
func concatBatches(recs []arrow.RecordBatch) (arrow.RecordBatch, error) {
	if len(recs) == 1 {
		recs[0].Retain()
		return recs[0], nil
	}
	mem := memory.DefaultAllocator
	sc := recs[0].Schema()
	cols := make([]arrow.Array, 0, sc.NumFields())
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	var n int64
	for _, r := range recs {
		n += r.NumRows()
	}
	parts := make([]arrow.Array, len(recs))
	for i := 0; i < sc.NumFields(); i++ {
		for j, r := range recs {
			parts[j] = r.Column(i)
		}
		c, err := array.Concatenate(parts, mem)
		if err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	return array.NewRecordBatch(sc, cols, n), nil
}

// withDestinations is rec's columns plus proto.ColDestination naming each
// row's destination by ranges, as a batch of schema.
func withDestinations(schema *arrow.Schema, rec arrow.RecordBatch, ranges []SegmentRange) (arrow.RecordBatch, error) {
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	b.Reserve(int(rec.NumRows()))
	data := 0
	for _, r := range ranges {
		data += int(r.Rows) * len(r.Destination)
	}
	b.ReserveData(data) // once: per range, each reservation regrew the buffer
	for _, r := range ranges {
		for i := int64(0); i < r.Rows; i++ {
			b.Append(r.Destination)
		}
	}
	d := b.NewArray()
	defer d.Release()
	cols := append(append([]arrow.Array{}, rec.Columns()...), d)
	return array.NewRecordBatch(schema, cols, rec.NumRows()), nil
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
