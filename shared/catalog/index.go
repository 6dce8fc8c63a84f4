package catalog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// PackRef is one pack to index, as its footer describes it.
type PackRef struct {
	Meta   packstore.PackMeta // from the pack footer
	Schema *arrow.Schema      // the pack's row schema (footer)
	Path   string             // store-relative path
	Bytes  int64
	// Trace is the W3C traceparent of the flush that wrote the pack (from
	// its event), so a snapshot's publish can link to the packs it admits.
	Trace string

	// data is the pack's bytes when it is small enough to stage (see
	// stage.go); nil: the engine reads the pack where the store keeps it.
	data []byte
	// entries is a segment's destination index as read with the footer
	// (readRef), so that it is parsed once however often it is asked for.
	entries []proto.SegmentEntry
}

// Entries is a segment's destination index (nil for a pack): as read with
// the footer when the ref was read (ReadRef), else parsed from Meta.
func (p PackRef) Entries() ([]proto.SegmentEntry, error) {
	if p.entries != nil {
		return p.entries, nil
	}
	return p.Meta.Entries()
}

// PackKey is a pack's identity in the catalog: the store it is read from
// and its id.
type PackKey struct{ StoreID, PackID string }

// Indexed reports which of keys the inventory already records.
func (c *Catalog) Indexed(ctx context.Context, keys []PackKey) (map[PackKey]bool, error) {
	out := map[PackKey]bool{}
	for start := 0; start < len(keys); start += 1000 {
		chunk := keys[start:min(start+1000, len(keys))]
		tuples := make([]string, len(chunk))
		for i, k := range chunk {
			tuples[i] = "(" + quote(k.StoreID) + ", " + quote(k.PackID) + ")"
		}
		// One row whatever matches (an aggregate without GROUP BY): the
		// usual answer is "none of them", and on chDB an empty result costs
		// a second statement for its header (chdb.Conn.Query).
		res, err := c.conn.Query(ctx, "SELECT groupUniqArray((store_id, pack_id)) FROM "+ident(c.n.packs())+" WHERE (store_id, pack_id) IN ("+strings.Join(tuples, ", ")+")"+c.limits.settings())
		if err != nil {
			return nil, fmt.Errorf("reading pack inventory: %w", err)
		}
		if len(res.Rows) != 1 {
			return nil, fmt.Errorf("reading pack inventory: %w", errNoRows)
		}
		found, _ := res.Rows[0][0].([]any)
		for _, k := range found {
			t, _ := k.([]any)
			if len(t) != 2 {
				return nil, fmt.Errorf("reading pack inventory: unexpected key %v", k)
			}
			out[PackKey{asString(t[0]), asString(t[1])}] = true
		}
	}
	return out, nil
}

// Inventory returns the paths of every pack the inventory records from storeID.
func (c *Catalog) Inventory(ctx context.Context, storeID string) (map[string]bool, error) {
	res, err := c.conn.Query(ctx, "SELECT DISTINCT path FROM "+ident(c.n.packs())+" WHERE store_id = "+quote(storeID)+c.limits.settings())
	if err != nil {
		return nil, fmt.Errorf("reading pack inventory: %w", err)
	}
	out := make(map[string]bool, len(res.Rows))
	for _, r := range res.Rows {
		out[asString(r[0])] = true
	}
	return out, nil
}

// IndexStats counts what one Index call did.
type IndexStats struct {
	Packs, Skipped, Rows, Inserts int
}

// Index inserts the rows of packs (read from store) into their rows tables,
// then records the packs in the inventory. Packs already in the inventory
// are skipped; indexing a pack again would be harmless anyway (its rows
// carry its identity and fold onto themselves). Packs of one table and
// schema go into one INSERT ... SELECT over all their files.
func (c *Catalog) Index(ctx context.Context, store packstore.Store, packs []PackRef) (IndexStats, error) {
	var st IndexStats
	if len(packs) == 0 {
		return st, nil
	}
	keys := make([]PackKey, len(packs))
	for i, p := range packs {
		keys[i] = PackKey{store.ID(), p.Meta.PackID}
	}
	done, err := c.Indexed(ctx, keys)
	if err != nil {
		return st, err
	}
	type group struct {
		ti    TableInfo
		packs []PackRef
	}
	groups := map[string]*group{}
	var order []string
	seen := map[PackKey]bool{}
	for i, p := range packs {
		if done[keys[i]] || seen[keys[i]] {
			st.Skipped++
			continue
		}
		seen[keys[i]] = true
		// Packs of one schema differ in their columns when some carry the
		// NULL-array markers (the pack writer adds them only when needed): one
		// INSERT reads every file with one structure, so they go apart.
		gk := p.Meta.Table + "\x00" + p.Meta.Schema
		if p.Schema != nil && len(p.Schema.FieldIndices(proto.ColNulls)) > 0 {
			gk += "\x00nulls"
		}
		// A segment's file has the destination column a pack's lacks.
		if p.Meta.IsSegment() {
			gk += "\x00segment"
		}
		g := groups[gk]
		if g == nil {
			ti, err := TableInfoFromSchema(p.Meta.Table, p.Schema, p.Meta.Schema)
			if err != nil {
				return st, fmt.Errorf("indexing pack %s: %w", p.Meta.PackID, err)
			}
			g = &group{ti: ti}
			groups[gk] = g
			order = append(order, gk)
		}
		g.packs = append(g.packs, p)
	}
	sort.Strings(order)
	var indexed []PackRef
	for _, gk := range order {
		g := groups[gk]
		reg, err := c.Register(ctx, g.ti)
		if err != nil {
			return st, fmt.Errorf("indexing packs of %s: %w", g.ti.Name, err)
		}
		g.ti.Generation = reg.Generation
		plan, err := c.insertPlan(g.ti, g.packs[0].Schema, g.packs[0].Meta.IsSegment())
		plan.settings = insertSettings + c.limits.settingsList()
		if err != nil {
			return st, err
		}
		stmts, files, err := c.groupSQL(store, plan, g.packs)
		if err != nil {
			return st, err
		}
		for _, q := range stmts {
			if err = c.conn.Exec(ctx, q); err != nil {
				break
			}
			st.Inserts++
		}
		for _, f := range files {
			os.Remove(f)
		}
		if err != nil {
			return st, fmt.Errorf("indexing %d packs of %s: %w", len(g.packs), g.ti.Name, err)
		}
		for _, p := range g.packs {
			st.Rows += int(p.Meta.Rows)
		}
		indexed = append(indexed, g.packs...)
	}
	if err := c.recordPacks(ctx, store.ID(), indexed); err != nil {
		return st, err
	}
	st.Packs = len(indexed)
	return st, nil
}

// insertSettings tune the rows INSERT: two insert pipelines (sorting the
// new parts in parallel), and no ReplacingMergeTree collapse at insert time
// (rows equal on the whole sort key are copies of one change; merges and the
// read path's resolution fold them anyway). Measured on chDB with 5 packs of
// 10,000 rows per INSERT, settings interleaved in one process on the loaded
// machine: median 169k rows/s against 110k with the defaults. The limits
// (IndexLimits) follow.
const insertSettings = " SETTINGS max_insert_threads = 2, optimize_on_insert = 0, "

// Defaults of IndexLimits (config indexer.max_memory, indexer.max_statement_time).
const (
	DefaultIndexMaxMemory = 1 << 30
	DefaultIndexMaxTime   = 30 * time.Second
)

// IndexLimits bound indexing, so that no pack can make it take unbounded
// memory or time: a statement over a limit fails (and is retried pack by
// pack, then with backoff) instead of stalling the engine, which on chDB
// runs one statement at a time for every user of the process (the
// publisher's lease renewal waits behind it).
type IndexLimits struct {
	// MaxMemory bounds one indexing statement in the engine
	// (max_memory_usage) and what verifying one pack may allocate at a time
	// in Go (packstore.VerifyPack). 0: DefaultIndexMaxMemory.
	MaxMemory int64
	// MaxTime bounds one indexing statement (max_execution_time; whole
	// seconds, at least 1). 0: DefaultIndexMaxTime.
	MaxTime time.Duration
}

// The read limits' defaults (Options.ReadLimits): a page of at most
// 100,000 rows resolves in seconds; these only stop a pathological read.
const (
	DefaultReadMaxMemory = 2 << 30
	DefaultReadMaxTime   = 2 * time.Minute
)

func (l IndexLimits) readDefaults() IndexLimits {
	if l.MaxMemory <= 0 {
		l.MaxMemory = DefaultReadMaxMemory
	}
	if l.MaxTime <= 0 {
		l.MaxTime = DefaultReadMaxTime
	}
	return l
}

func (l IndexLimits) withDefaults() IndexLimits {
	if l.MaxMemory <= 0 {
		l.MaxMemory = DefaultIndexMaxMemory
	}
	if l.MaxTime <= 0 {
		l.MaxTime = DefaultIndexMaxTime
	}
	return l
}

// settingsList is the limits as ClickHouse query settings.
func (l IndexLimits) settingsList() string {
	secs := max(int64((l.MaxTime+time.Second-1)/time.Second), 1)
	return "max_memory_usage = " + strconv.FormatInt(l.MaxMemory, 10) + ", max_execution_time = " + strconv.FormatInt(secs, 10) + ", timeout_overflow_mode = 'throw'"
}

// settings is a SETTINGS clause of the limits, for the indexer's queries.
func (l IndexLimits) settings() string { return " SETTINGS " + l.settingsList() }

// insertPlan is the INSERT ... SELECT of one group (one table, one schema,
// segments or packs) without its source: the target columns, the structure
// file() reads the files with, and the select list after the destination.
type insertPlan struct {
	table     string // the rows table, quoted
	target    string // column list, destination first and pack identity last
	structure []string
	common    string // the select list between destination and the pack identity
	settings  string // the SETTINGS clause
	// segment: the files are segments, each row's destination its
	// proto.ColDestination (read in structure); otherwise the destination
	// is the pack's, a literal.
	segment bool
}

// destination is the select expression of pk's rows' destination.
func (p insertPlan) destination(pk PackRef) string {
	if p.segment {
		return ident(proto.ColDestination)
	}
	return quote(pk.Meta.Destination)
}

func (c *Catalog) insertPlan(ti TableInfo, s *arrow.Schema, segment bool) (insertPlan, error) {
	var structure, target, exprs []string
	if segment {
		structure = append(structure, ident(proto.ColDestination)+" String")
	}
	target = append(target, ident(rowDest))
	for _, f := range s.Fields() {
		switch f.Name {
		case proto.ColOp:
			structure = append(structure, ident(f.Name)+" Int8")
		case proto.ColLSN, proto.ColSeq:
			structure = append(structure, ident(f.Name)+" UInt64")
		case proto.ColCommitTime:
			structure = append(structure, ident(f.Name)+" Nullable(DateTime64(6, 'UTC'))")
		case proto.ColUnchanged, proto.ColNulls:
			structure = append(structure, ident(f.Name)+" Array(Nullable(String))")
		default:
			if proto.IsSystemColumn(f.Name) {
				continue // a system column this build does not store
			}
			k, err := proto.FieldKind(f)
			if err != nil {
				return insertPlan{}, fmt.Errorf("%w: %v", ErrBadSchema, err)
			}
			structure = append(structure, ident(f.Name)+" "+chRead(k, f.Nullable))
			target = append(target, ident(f.Name))
			exprs = append(exprs, selectExpr(f.Name, k, f.Nullable, ti.isKey(f.Name)))
		}
	}
	has := func(n string) bool { return len(s.FieldIndices(n)) == 1 }
	target = append(target, ident(proto.ColLSN), ident(proto.ColSeq), ident(proto.ColOp), ident(proto.ColUnchanged), ident(proto.ColNulls), ident(proto.ColCommitTime), ident(rowStore), ident(rowPack))
	exprs = append(exprs, ident(proto.ColLSN), ident(proto.ColSeq), ident(proto.ColOp))
	for _, col := range []string{proto.ColUnchanged, proto.ColNulls} {
		if has(col) {
			exprs = append(exprs, "arrayMap(x -> assumeNotNull(x), arrayFilter(x -> isNotNull(x), "+ident(col)+"))")
		} else {
			exprs = append(exprs, "CAST([] AS Array(String))")
		}
	}
	if has(proto.ColCommitTime) {
		exprs = append(exprs, "toUnixTimestamp64Micro("+ident(proto.ColCommitTime)+")")
	} else {
		exprs = append(exprs, "CAST(NULL AS Nullable(Int64))")
	}
	return insertPlan{
		table:     c.rowsTable(ti),
		target:    strings.Join(target, ", "),
		structure: structure,
		common:    strings.Join(exprs, ", "),
		segment:   segment,
	}, nil
}

// maxUnionQuery bounds the length of one per-pack UNION ALL statement
// (ClickHouse refuses queries over max_query_size, 256 KiB by default).
const maxUnionQuery = 200 << 10

// unionSQL is the INSERT ... SELECT of packs read where the store keeps
// them: a UNION ALL of one table-function read per pack, each tagged with
// its pack identity, split into statements under maxUnionQuery.
func (p insertPlan) unionSQL(store packstore.Store, packs []PackRef) ([]string, error) {
	structArg := strings.Join(p.structure, ", ")
	head := "INSERT INTO " + p.table + " (" + p.target + ") "
	var out []string
	var parts []string
	size := len(head)
	for _, pk := range packs {
		tf, err := withStructure(store.TableFunction(pk.Path), structArg)
		if err != nil {
			return nil, fmt.Errorf("indexing pack %s: %w", pk.Meta.PackID, err)
		}
		part := "SELECT " + p.destination(pk) + ", " + p.common + ", " + quote(store.ID()) + ", " + quote(pk.Meta.PackID) + " FROM " + tf
		if len(parts) > 0 && size+len(part)+len(" UNION ALL ") > maxUnionQuery {
			out = append(out, head+strings.Join(parts, " UNION ALL ")+p.settings)
			parts, size = nil, len(head)
		}
		parts = append(parts, part)
		size += len(part) + len(" UNION ALL ")
	}
	if len(parts) > 0 {
		out = append(out, head+strings.Join(parts, " UNION ALL ")+p.settings)
	}
	return out, nil
}

// recordPacks writes the inventory rows of packs whose rows are durable,
// in one INSERT (one part, so a segment's destinations are recorded
// together or not at all): one row per pack, one per (segment,
// destination) for a segment, with that destination's rows, tombstones,
// first and last (its footer entry) and the segment's path and bytes.
func (c *Catalog) recordPacks(ctx context.Context, storeID string, packs []PackRef) error {
	if len(packs) == 0 {
		return nil
	}
	// Every value a literal, the server's clock read once: a VALUES list
	// with an expression in a row makes the engine parse every row as an
	// expression (1,000 rows: about 2 s on chDB against 50 ms).
	res, err := c.conn.Query(ctx, "SELECT "+nowMicros)
	if err == nil && len(res.Rows) != 1 {
		err = errNoRows
	}
	if err != nil {
		return fmt.Errorf("recording %d packs in the inventory: reading the server clock: %w", len(packs), err)
	}
	now := asInt(res.Rows[0][0])
	// One row per (pack, destination), written into one builder: a
	// segment's thousands of rows share its own values, quoted once.
	var vals strings.Builder
	var num []byte
	nrows := 0
	for _, p := range packs {
		m := p.Meta
		head := "(" + quote(storeID) + ", " + quote(m.PackID) + ", "
		mid := ", " + quote(m.Table) + ", " + quote(p.Path) + ", " + quote(m.Schema)
		tail := ", " + i64(p.Bytes) + ", " + i64(now) + ", " + quote(p.Trace) + ")"
		row := func(dest string, first, last proto.Position, rows, tombs int64) {
			if nrows > 0 {
				vals.WriteString(", ")
			}
			nrows++
			vals.WriteString(head)
			vals.WriteString(quote(dest))
			vals.WriteString(mid)
			num = num[:0]
			for _, v := range [...]uint64{uint64(first.LSN), first.Seq, uint64(last.LSN), last.Seq} {
				num = strconv.AppendUint(append(num, ", "...), v, 10)
			}
			for _, v := range [...]int64{rows, tombs} {
				num = strconv.AppendInt(append(num, ", "...), v, 10)
			}
			vals.Write(num)
			vals.WriteString(tail)
		}
		if !m.IsSegment() {
			row(m.Destination, m.First, m.Last, m.Rows, m.Tombstones)
			continue
		}
		entries, err := p.Entries()
		if err != nil {
			return fmt.Errorf("recording segment %s in the inventory: %w", m.PackID, err)
		}
		for _, e := range entries {
			first, err1 := proto.ParsePosition(e.First)
			last, err2 := proto.ParsePosition(e.Last)
			if err := errors.Join(err1, err2); err != nil {
				return fmt.Errorf("recording segment %s in the inventory: %w", m.PackID, err)
			}
			row(e.Destination, first, last, e.Rows, e.Tombstones)
		}
	}
	q := "INSERT INTO " + ident(c.n.packs()) + " (store_id, pack_id, destination, table, path, fingerprint, first_lsn, first_seq, last_lsn, last_seq, rows, tombstones, bytes, indexed_at, trace)" + c.limits.settings() + " VALUES " + vals.String()
	if err := c.conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("recording %d packs in the inventory (%d rows): %w", len(packs), nrows, err)
	}
	return nil
}

// ReadRef reads a pack from store, verifies it whole (packstore.VerifyPack,
// within the default limits) and checks it against the path it was found
// at: the path must be the footer's own <destination>/<table>/<pack_id>.arrow
// (a segment's: proto.SegmentPath of its id and table).
// Errors wrapping packstore.ErrCorruptPack or ErrPackMismatch are permanent
// for the pack.
func ReadRef(ctx context.Context, store packstore.Store, path string) (PackRef, error) {
	return readRef(ctx, store, path, 0)
}

// ReadRef is the package's ReadRef within c's limits.
func (c *Catalog) ReadRef(ctx context.Context, store packstore.Store, path string) (PackRef, error) {
	return readRef(ctx, store, path, c.limits.MaxMemory)
}

// readRef verifies the whole pack before anything (the staging writer,
// the engine) reads its rows: a pack whose bytes were damaged after it was
// written is refused here, as corrupt, whatever part the damage hit.
func readRef(ctx context.Context, store packstore.Store, path string, limit int64) (PackRef, error) {
	data, err := store.Get(ctx, path)
	if err != nil {
		return PackRef{}, err
	}
	meta, schema, entries, err := packstore.VerifyPackEntries(data, limit)
	if err != nil {
		return PackRef{}, fmt.Errorf("reading pack %s: %w", path, err)
	}
	if want := meta.Path(); want != path {
		return PackRef{}, fmt.Errorf("%w: pack at %s says it is %s (destination %s, table %s)", ErrPackMismatch, path, want, meta.Destination, meta.Table)
	}
	ref := PackRef{Meta: meta, Schema: schema, Path: path, Bytes: int64(len(data)), entries: entries}
	if len(data) <= stageMaxBytes {
		ref.data = data
	}
	return ref, nil
}

// PackTraces returns the recorded traceparents (at most limit) of the packs
// that the publish (version, publishID) admitted: the inventory rows above
// the previous snapshot's high-water and at or below its own.
func (c *Catalog) PackTraces(ctx context.Context, version uint64, publishID string, limit int) ([]string, error) {
	wt := ident(c.n.watermark())
	q := fmt.Sprintf("SELECT DISTINCT trace FROM %s WHERE trace != '' AND _block_number > (SELECT ifNull(max(inventory_block), 0) FROM %s WHERE version < %d) AND _block_number <= (SELECT ifNull(max(inventory_block), 0) FROM %s WHERE version = %d AND publish_id = %s) LIMIT %d",
		ident(c.n.packs()), wt, version, wt, version, quote(publishID), limit)
	res, err := c.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("reading the traces of snapshot %d: %w", version, err)
	}
	out := make([]string, 0, len(res.Rows))
	for _, r := range res.Rows {
		out = append(out, asString(r[0]))
	}
	return out, nil
}
