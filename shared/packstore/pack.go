package packstore

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
)

// PackMeta is what a pack's footer says about it.
type PackMeta struct {
	PackID      string
	StoreID     string
	Destination string
	Table       string
	Schema      string // schema fingerprint of the rows (arrowcodec.Fingerprint)
	First, Last proto.Position
	Rows        int64
	Tombstones  int64
	// Index is a segment's destination index: its footer's
	// proto.MetaPackDestinations, JSON []proto.SegmentEntry in row order
	// (Entries parses it); "" for a pack of format proto.PackFormatVersion.
	// A segment (format proto.SegmentFormatVersion) has an Index and no
	// Destination. A string, so that PackMeta stays comparable.
	Index string
}

// Entries returns a segment's destination index (nil for a pack). A
// PackMeta read from a footer has had its index checked already.
func (m PackMeta) Entries() ([]proto.SegmentEntry, error) {
	if !m.IsSegment() {
		return nil, nil
	}
	return parseSegmentIndex(m, m.Index)
}

// IsSegment reports whether m describes a segment.
func (m PackMeta) IsSegment() bool { return m.Index != "" }

// Path is the pack's store-relative path: proto.PackPath for a pack,
// proto.SegmentPath for a segment (whose id validateIdentity checked).
func (m PackMeta) Path() string {
	if m.IsSegment() {
		p, _ := proto.SegmentPath(m.PackID, m.Table)
		return p
	}
	return proto.PackPath(m.Destination, m.Table, m.PackID)
}

func (m PackMeta) validateIdentity(segment bool) error {
	switch {
	case m.PackID == "" || !fileRe.MatchString(m.PackID+".arrow"):
		return fmt.Errorf("%w: pack id %q", ErrBadPackMeta, m.PackID)
	case !storeIDRe.MatchString(m.StoreID):
		return fmt.Errorf("%w: store id %q", ErrBadPackMeta, m.StoreID)
	case m.Schema == "":
		return fmt.Errorf("%w: empty schema fingerprint", ErrBadPackMeta)
	}
	if segment {
		if m.Destination != "" {
			return fmt.Errorf("%w: segment names destination %q", ErrBadPackMeta, m.Destination)
		}
		if _, err := proto.SegmentTime(m.PackID); err != nil {
			return fmt.Errorf("%w: %v", ErrBadPackMeta, err)
		}
	} else if err := proto.ValidateDestination(m.Destination); err != nil {
		return fmt.Errorf("%w: %v", ErrBadPackMeta, err)
	}
	if err := proto.ValidateTable(m.Table); err != nil {
		return fmt.Errorf("%w: %v", ErrBadPackMeta, err)
	}
	return nil
}

// summary is what the system columns say about a set of batches.
type summary struct {
	rows, tombstones int64
	first, last      proto.Position
}

func summarize(recs []arrow.RecordBatch) (summary, error) {
	var s summary
	for _, rec := range recs {
		if err := s.add(rec); err != nil {
			return s, err
		}
	}
	return s, nil
}

// add counts rec's rows into s.
func (s *summary) add(rec arrow.RecordBatch) error {
	c, err := systemColumns(rec)
	if err != nil {
		return err
	}
	c.addRows(s, 0, rec.NumRows())
	return nil
}

// sysCols are the system columns a summary reads.
type sysCols struct {
	op       *array.Int8
	lsn, seq *array.Uint64
}

func systemColumns(rec arrow.RecordBatch) (sysCols, error) {
	sc := rec.Schema()
	opI, lsnI, seqI := sc.FieldIndices(proto.ColOp), sc.FieldIndices(proto.ColLSN), sc.FieldIndices(proto.ColSeq)
	if len(opI) != 1 || len(lsnI) != 1 || len(seqI) != 1 {
		return sysCols{}, fmt.Errorf("%w: rows lack the system columns %s, %s, %s", ErrBadPackMeta, proto.ColOp, proto.ColLSN, proto.ColSeq)
	}
	op, ok1 := rec.Column(opI[0]).(*array.Int8)
	lsn, ok2 := rec.Column(lsnI[0]).(*array.Uint64)
	seq, ok3 := rec.Column(seqI[0]).(*array.Uint64)
	if !ok1 || !ok2 || !ok3 {
		return sysCols{}, fmt.Errorf("%w: system columns have the wrong types (want int8, uint64, uint64)", ErrBadPackMeta)
	}
	return sysCols{op, lsn, seq}, nil
}

// addRows counts rows [lo, hi) into s.
func (c sysCols) addRows(s *summary, lo, hi int64) {
	for i := int(lo); i < int(hi); i++ {
		s.addRow(proto.Position{LSN: proto.LSN(c.lsn.Value(i)), Seq: c.seq.Value(i)}, proto.IsTombstone(c.op.Value(i)))
	}
}

// addRow counts one row at position p into s.
func (s *summary) addRow(p proto.Position, tombstone bool) {
	if s.rows == 0 || p.Less(s.first) {
		s.first = p
	}
	if s.rows == 0 || s.last.Less(p) {
		s.last = p
	}
	if tombstone {
		s.tombstones++
	}
	s.rows++
}

// merge counts o's rows into s.
func (s *summary) merge(o summary) {
	if o.rows == 0 {
		return
	}
	if s.rows == 0 || o.first.Less(s.first) {
		s.first = o.first
	}
	if s.rows == 0 || s.last.Less(o.last) {
		s.last = o.last
	}
	s.rows += o.rows
	s.tombstones += o.tombstones
}

// CompressMinBytes is the column data size from which a pack's bodies are
// zstd-compressed. Smaller packs are written uncompressed: setting up a
// zstd encoder (arrow-go makes one per file) costs far more CPU than such
// a pack saves on disk, and dominated the flusher's fan-out to many small
// destinations. Readers (DecodePack, ClickHouse) read either.
const CompressMinBytes = 64 << 10

func bodyBytes(recs []arrow.RecordBatch) int {
	n := 0
	for _, r := range recs {
		for _, c := range r.Columns() {
			for _, b := range c.Data().Buffers() {
				if b != nil {
					n += b.Len()
				}
			}
		}
	}
	return n
}

// compressParallelBytes: bodies this large compress their buffers in
// parallel.
const compressParallelBytes = 1 << 20

// newFileWriter starts the Arrow IPC file of a pack or a segment in buf:
// schema, the default allocator, zstd when the batches' bodies reach
// CompressMinBytes.
func newFileWriter(buf *bytes.Buffer, schema *arrow.Schema, recs []arrow.RecordBatch) (*ipc.FileWriter, error) {
	opts := []ipc.Option{ipc.WithSchema(schema), ipc.WithAllocator(memory.DefaultAllocator)}
	if n := bodyBytes(recs); n >= CompressMinBytes {
		opts = append(opts, ipc.WithZstd())
		if n >= compressParallelBytes {
			// A group commit's segment (thousands of destinations) is
			// encoded on the committer's path: its buffers compress on
			// every core.
			opts = append(opts, ipc.WithCompressConcurrency(runtime.GOMAXPROCS(0)))
		}
	}
	return ipc.NewFileWriter(buf, opts...)
}

// EncodePack writes recs (one schema) as a pack: an Arrow IPC file,
// zstd-compressed from CompressMinBytes of column data, whose footer schema metadata holds the table's own
// schema metadata plus the proto.MetaPack* keys, proto.MetaPackChecksum
// (the whole file's XXH3-64, checksum.go) last. Rows, Tombstones, First
// and Last are derived from the system columns; a non-zero value in meta
// that disagrees is refused.
func EncodePack(recs []arrow.RecordBatch, meta PackMeta) ([]byte, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("encoding pack: %w: no batches", ErrBadPackMeta)
	}
	if meta.IsSegment() {
		return nil, fmt.Errorf("encoding pack: %w: a segment is written by EncodeSegment", ErrBadPackMeta)
	}
	if err := meta.validateIdentity(false); err != nil {
		return nil, fmt.Errorf("encoding pack: %w", err)
	}
	base := recs[0].Schema()
	if len(base.FieldIndices(proto.ColDestination)) > 0 {
		return nil, fmt.Errorf("encoding pack %s: %w: rows carry %s (a segment's column)", meta.PackID, ErrBadPackMeta, proto.ColDestination)
	}
	for _, r := range recs[1:] {
		if !r.Schema().Equal(base) {
			return nil, fmt.Errorf("encoding pack %s: %w: batches have different schemas", meta.PackID, ErrBadPackMeta)
		}
	}
	s, err := summarize(recs)
	if err != nil {
		return nil, fmt.Errorf("encoding pack %s: %w", meta.PackID, err)
	}
	if s.rows == 0 {
		return nil, fmt.Errorf("encoding pack %s: %w: no rows", meta.PackID, ErrBadPackMeta)
	}
	check := func(name string, given, derived any, zero bool) error {
		if !zero && given != derived {
			return fmt.Errorf("encoding pack %s: %w: %s is %v, the rows say %v", meta.PackID, ErrBadPackMeta, name, given, derived)
		}
		return nil
	}
	for _, e := range []error{
		check("rows", meta.Rows, s.rows, meta.Rows == 0),
		check("tombstones", meta.Tombstones, s.tombstones, meta.Tombstones == 0),
		check("first", meta.First, s.first, meta.First.IsZero()),
		check("last", meta.Last, s.last, meta.Last.IsZero()),
	} {
		if e != nil {
			return nil, e
		}
	}
	meta.Rows, meta.Tombstones, meta.First, meta.Last = s.rows, s.tombstones, s.first, s.last

	keys, vals := tableMetadata(base)
	for _, kv := range [][2]string{
		{proto.MetaPackFormat, proto.PackFormatVersion},
		{proto.MetaPackID, meta.PackID},
		{proto.MetaPackStoreID, meta.StoreID},
		{proto.MetaPackDestination, meta.Destination},
		{proto.MetaPackTable, meta.Table},
		{proto.MetaPackSchema, meta.Schema},
		{proto.MetaPackFirst, meta.First.String()},
		{proto.MetaPackLast, meta.Last.String()},
		{proto.MetaPackRows, strconv.FormatInt(meta.Rows, 10)},
		{proto.MetaPackTombstones, strconv.FormatInt(meta.Tombstones, 10)},
	} {
		keys = append(keys, kv[0])
		vals = append(vals, kv[1])
	}
	keys, vals, placeholder := withChecksum(keys, vals)
	md := arrow.NewMetadata(keys, vals)
	fields := base.Fields()
	if withNulls, ok := nullArrays(recs); ok {
		recs = withNulls
		defer func() {
			for _, r := range withNulls {
				r.Release()
			}
		}()
		fields = withNulls[0].Schema().Fields()
	}
	schema := arrow.NewSchema(fields, &md)

	var buf bytes.Buffer
	w, err := newFileWriter(&buf, schema, recs)
	if err != nil {
		return nil, fmt.Errorf("encoding pack %s: %w", meta.PackID, err)
	}
	for _, r := range recs {
		if r.NumRows() == 0 {
			continue
		}
		if err := w.Write(r); err != nil {
			_ = w.Close()
			return nil, fmt.Errorf("encoding pack %s: %w", meta.PackID, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encoding pack %s: %w", meta.PackID, err)
	}
	if err := sealChecksum(buf.Bytes(), placeholder); err != nil {
		return nil, fmt.Errorf("encoding pack %s: %w", meta.PackID, err)
	}
	return buf.Bytes(), nil
}

func metaFromSchema(s *arrow.Schema) (PackMeta, error) {
	m, _, err := metaAndEntries(s)
	return m, err
}

// metaAndEntries is metaFromSchema, also returning a segment's parsed
// destination index (nil for a pack).
func metaAndEntries(s *arrow.Schema) (PackMeta, []proto.SegmentEntry, error) {
	md := s.Metadata()
	get := func(k string) (string, error) {
		v, ok := md.GetValue(k)
		if !ok {
			return "", fmt.Errorf("%w: footer lacks %s", ErrCorruptPack, k)
		}
		return v, nil
	}
	var m PackMeta
	f, err := get(proto.MetaPackFormat)
	if err != nil {
		return m, nil, err
	}
	if f != proto.PackFormatVersion && f != proto.SegmentFormatVersion {
		return m, nil, fmt.Errorf("%w: pack format %q, this build reads %q and %q", ErrCorruptPack, f, proto.PackFormatVersion, proto.SegmentFormatVersion)
	}
	segment := f == proto.SegmentFormatVersion
	for _, kv := range []struct {
		k string
		v *string
	}{{proto.MetaPackID, &m.PackID}, {proto.MetaPackStoreID, &m.StoreID}, {proto.MetaPackDestination, &m.Destination}, {proto.MetaPackTable, &m.Table}, {proto.MetaPackSchema, &m.Schema}} {
		if *kv.v, err = get(kv.k); err != nil {
			return m, nil, err
		}
	}
	for _, kv := range []struct {
		k string
		p *proto.Position
	}{{proto.MetaPackFirst, &m.First}, {proto.MetaPackLast, &m.Last}} {
		v, err := get(kv.k)
		if err != nil {
			return m, nil, err
		}
		if *kv.p, err = proto.ParsePosition(v); err != nil {
			return m, nil, fmt.Errorf("%w: %s: %v", ErrCorruptPack, kv.k, err)
		}
	}
	for _, kv := range []struct {
		k string
		n *int64
	}{{proto.MetaPackRows, &m.Rows}, {proto.MetaPackTombstones, &m.Tombstones}} {
		v, err := get(kv.k)
		if err != nil {
			return m, nil, err
		}
		if *kv.n, err = strconv.ParseInt(v, 10, 64); err != nil {
			return m, nil, fmt.Errorf("%w: %s: %v", ErrCorruptPack, kv.k, err)
		}
	}
	if err := m.validateIdentity(segment); err != nil {
		return m, nil, fmt.Errorf("%w: %v", ErrCorruptPack, err)
	}
	idx, hasIdx := md.GetValue(proto.MetaPackDestinations)
	var entries []proto.SegmentEntry
	switch {
	case segment && !hasIdx:
		return m, nil, fmt.Errorf("%w: segment footer lacks %s", ErrCorruptPack, proto.MetaPackDestinations)
	case segment:
		if entries, err = parseSegmentIndex(m, idx); err != nil {
			return m, nil, err
		}
		m.Index = idx
	case hasIdx:
		return m, nil, fmt.Errorf("%w: pack footer has %s", ErrCorruptPack, proto.MetaPackDestinations)
	}
	hasCol := len(s.FieldIndices(proto.ColDestination)) > 0
	if hasCol != segment {
		return m, nil, fmt.Errorf("%w: format %s pack with %s column: %v", ErrCorruptPack, f, proto.ColDestination, hasCol)
	}
	return m, entries, nil
}

// ReadPackMeta reads only a pack's footer: its metadata and schema (with
// the table's and the pack's metadata). It checks the footer's flatbuffer
// before the Arrow reader trusts it, but not the rows: VerifyPack does.
func ReadPackMeta(data []byte) (meta PackMeta, schema *arrow.Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading pack footer: %w: %v", ErrCorruptPack, r)
		}
	}()
	if err := arrowcodec.VerifyFileFooter(data); err != nil {
		return PackMeta{}, nil, fmt.Errorf("reading pack footer: %w: %v", ErrCorruptPack, err)
	}
	rd, err := ipc.NewFileReader(bytes.NewReader(data))
	if err != nil {
		return PackMeta{}, nil, fmt.Errorf("reading pack footer: %w: %v", ErrCorruptPack, err)
	}
	defer rd.Close()
	meta, err = metaFromSchema(rd.Schema())
	if err != nil {
		return PackMeta{}, nil, fmt.Errorf("reading pack footer: %w", err)
	}
	return meta, rd.Schema(), nil
}

// DecodeLimit is the default bound on what decoding one pack may allocate
// at a time (one record batch, decompressed) and on the decompressed size
// of any of its batches. A pack's batch is one routed message, a few MiB.
const DecodeLimit = 1 << 30

// DecodePack reads a whole pack, verified as VerifyPack verifies it. The
// caller releases every returned batch.
func DecodePack(data []byte, mem memory.Allocator) (meta PackMeta, recs []arrow.RecordBatch, err error) {
	meta, _, recs, _, err = decodePack(data, mem, DecodeLimit, true)
	return meta, recs, err
}

// VerifyPack checks a whole pack without keeping its rows (one batch is in
// memory at a time, within limit bytes; 0 means DecodeLimit): the file's
// framing, footer and flatbuffers, every compressed buffer's frame to its
// checksum, every batch with array.ValidateRecordFull, the schema against
// the kinds its columns declare, and the footer's rows, tombstones, first
// and last positions against the rows, and, before any batch is read, the
// whole file against its proto.MetaPackChecksum (a file written before
// checksums has none and is read without). Every error wraps
// ErrCorruptPack.
// A pack that passes can be read by arrow-go and by the catalog engine
// without either trusting a damaged length.
func VerifyPack(data []byte, limit int64) (PackMeta, *arrow.Schema, error) {
	meta, schema, _, err := VerifyPackEntries(data, limit)
	return meta, schema, err
}

// VerifyPackEntries is VerifyPack, also returning a segment's destination
// index, parsed and checked (nil for a pack): what PackMeta.Entries would
// parse again from the footer's JSON, thousands of entries in a segment of
// many destinations.
func VerifyPackEntries(data []byte, limit int64) (PackMeta, *arrow.Schema, []proto.SegmentEntry, error) {
	meta, schema, _, entries, err := decodePack(data, nil, limit, false)
	return meta, schema, entries, err
}

// decodePack verifies data, returning its batches when keep is set (and
// releasing each after checking it otherwise). On an error it returns
// nothing and has released everything it allocated.
func decodePack(data []byte, mem memory.Allocator, limit int64, keep bool) (meta PackMeta, schema *arrow.Schema, recs []arrow.RecordBatch, entries []proto.SegmentEntry, err error) {
	if limit <= 0 {
		limit = DecodeLimit
	}
	la := arrowcodec.NewLimitedAllocator(mem, limit)
	var kept []arrow.RecordBatch
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decoding pack: %w: %v", ErrCorruptPack, r)
		}
		if err != nil {
			for _, rec := range kept {
				rec.Release()
			}
			meta, schema, recs, entries = PackMeta{}, nil, nil, nil
			la.ReleaseLeaked() // what arrow dropped on its error paths
		}
	}()
	if err := arrowcodec.VerifyFile(data, limit); err != nil {
		return PackMeta{}, nil, nil, nil, fmt.Errorf("decoding pack: %w: %v", ErrCorruptPack, err)
	}
	rd, err := ipc.NewFileReader(bytes.NewReader(data), ipc.WithAllocator(la))
	if err != nil {
		return PackMeta{}, nil, nil, nil, fmt.Errorf("decoding pack: %w: %v", ErrCorruptPack, err)
	}
	defer rd.Close()
	schema = rd.Schema()
	if err := verifyChecksum(data, schema); err != nil {
		return PackMeta{}, nil, nil, nil, fmt.Errorf("decoding pack %s: %w: %v", fileName(schema.Metadata()), ErrCorruptPack, err)
	}
	var seg segmentCheck
	meta, seg.entries, err = metaAndEntries(schema)
	if err != nil {
		return PackMeta{}, nil, nil, nil, fmt.Errorf("decoding pack: %w", err)
	}
	if err := checkSchema(schema); err != nil {
		return PackMeta{}, nil, nil, nil, fmt.Errorf("decoding pack %s: %w: %v", meta.PackID, ErrCorruptPack, err)
	}
	var sum summary
	for i := 0; i < rd.NumRecords(); i++ {
		rec, err := rd.RecordBatchAt(i)
		if err != nil {
			return PackMeta{}, nil, nil, nil, fmt.Errorf("decoding pack %s: batch %d: %w: %v", meta.PackID, i, ErrCorruptPack, err)
		}
		if keep {
			kept = append(kept, rec)
		}
		err = array.ValidateRecordFull(rec)
		if err == nil {
			err = sum.add(rec)
		}
		if err == nil && meta.IsSegment() {
			err = seg.add(rec)
		}
		if !keep {
			rec.Release()
		}
		if err != nil {
			return PackMeta{}, nil, nil, nil, fmt.Errorf("decoding pack %s: batch %d: %w: %v", meta.PackID, i, ErrCorruptPack, err)
		}
	}
	for _, c := range []struct {
		name         string
		footer, rows any
	}{
		{"rows", meta.Rows, sum.rows},
		{"tombstones", meta.Tombstones, sum.tombstones},
		{"first position", meta.First, sum.first},
		{"last position", meta.Last, sum.last},
	} {
		if c.footer != c.rows {
			return PackMeta{}, nil, nil, nil, fmt.Errorf("decoding pack %s: %w: footer says %s %v, the rows say %v", meta.PackID, ErrCorruptPack, c.name, c.footer, c.rows)
		}
	}
	if meta.IsSegment() {
		if err := seg.finish(); err != nil {
			return PackMeta{}, nil, nil, nil, fmt.Errorf("decoding segment %s: %w: %v", meta.PackID, ErrCorruptPack, err)
		}
	}
	return meta, schema, kept, seg.entries, nil
}

// checkSchema checks a pack's columns against what they declare: the
// system columns sluice reads have their types, and every other column the
// Arrow type of the kind in its sluice.kind metadata (which the catalog
// reads it as).
func checkSchema(s *arrow.Schema) error {
	sys := map[string]arrow.DataType{
		proto.ColOp:          arrow.PrimitiveTypes.Int8,
		proto.ColLSN:         arrow.PrimitiveTypes.Uint64,
		proto.ColSeq:         arrow.PrimitiveTypes.Uint64,
		proto.ColCommitTime:  &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"},
		proto.ColUnchanged:   arrow.ListOf(arrow.BinaryTypes.String),
		proto.ColNulls:       arrow.ListOf(arrow.BinaryTypes.String),
		proto.ColDestination: arrow.BinaryTypes.String,
	}
	seen := map[string]bool{}
	for _, f := range s.Fields() {
		if seen[f.Name] {
			return fmt.Errorf("column %q appears twice", f.Name)
		}
		seen[f.Name] = true
		if proto.IsSystemColumn(f.Name) {
			if want, ok := sys[f.Name]; ok && !arrow.TypeEqual(f.Type, want) {
				return fmt.Errorf("system column %s is %s, want %s", f.Name, f.Type, want)
			}
			continue
		}
		k, err := proto.FieldKind(f)
		if err != nil {
			return err
		}
		want, _ := k.ArrowType()
		if !arrow.TypeEqual(f.Type, want) {
			return fmt.Errorf("column %q declares kind %s (%s) but holds %s", f.Name, k, want, f.Type)
		}
	}
	for _, c := range []string{proto.ColOp, proto.ColLSN, proto.ColSeq} {
		if !seen[c] {
			return fmt.Errorf("no system column %s", c)
		}
	}
	return nil
}

// nullArrays returns recs with the proto.ColNulls column added, naming in
// each row the array columns that are NULL there, when some array value is
// NULL; ok is false (and recs untouched) otherwise.
func nullArrays(recs []arrow.RecordBatch) (out []arrow.RecordBatch, ok bool) {
	sc := recs[0].Schema()
	if len(sc.FieldIndices(proto.ColNulls)) > 0 {
		return nil, false
	}
	var lists []int
	for i, f := range sc.Fields() {
		if _, isList := f.Type.(*arrow.ListType); isList && !proto.IsSystemColumn(f.Name) {
			lists = append(lists, i)
		}
	}
	any := false
	for _, r := range recs {
		for _, i := range lists {
			any = any || r.Column(i).NullN() > 0
		}
	}
	if !any {
		return nil, false
	}
	field := arrow.Field{Name: proto.ColNulls, Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true}
	fields := append(append([]arrow.Field{}, sc.Fields()...), field)
	md := sc.Metadata()
	schema := arrow.NewSchema(fields, &md)
	for _, r := range recs {
		b := array.NewListBuilder(memory.DefaultAllocator, arrow.BinaryTypes.String)
		vb := b.ValueBuilder().(*array.StringBuilder)
		for row := 0; row < int(r.NumRows()); row++ {
			b.Append(true)
			for _, i := range lists {
				if r.Column(i).IsNull(row) {
					vb.Append(sc.Field(i).Name)
				}
			}
		}
		col := b.NewArray()
		b.Release()
		cols := append(append([]arrow.Array{}, r.Columns()...), col)
		out = append(out, array.NewRecordBatch(schema, cols, r.NumRows()))
		col.Release()
	}
	return out, true
}
