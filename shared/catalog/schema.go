package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/sluice-cdc/sluice/proto"
)

// SchemaVersion is the catalog schema this build creates and reads. A
// catalog stamped with any other version is refused, never migrated.
// Version 9 names every column a rows table adds beside its source
// table's under proto.SystemPrefix (_sluice_destination, _sluice_store_id,
// _sluice_pack_id; before: destination, store_id, pack_id), so a source
// column of any other name can never collide with one
// (docs/adr/0044-reserved-catalog-names.md); a version 8 catalog is
// refused and rebuilt from the packs (sluice catalog rebuild).
// Version 8 numbers table generations: a registry row's generation names
// the rows table its schema's packs are indexed into (rows@<generation>
// from the second on), opened when a column's kind or the primary key
// changes (docs/adr/0028-table-generations.md).
// Version 7 makes membership flat: a snapshot's members are the inventory
// rows at or below the inventory high-water its watermark row records,
// minus the members removed (by compaction or purge) at or below it; the
// watermark rows hold no member arrays and there is no manifest view, and
// the inventory keeps every row it is given (a plain MergeTree), so a
// merge never moves a member above a high-water it was admitted under
// (docs/adr/0022-flat-membership.md).
// Version 6 adds snapshot retention: the expiry horizon the publisher
// advances under its fence (p_retention) and the pins (p_snapshot_pins).
// Version 5 records a segment (a pack holding many destinations) with one
// inventory row per (store_id, pack_id, destination), the inventory's sort
// key; a per-destination pack is the one-destination case. Version 4 persists the inventory's block numbers and records in each
// watermark row the inventory high-water its publish proved (a publish
// admits by block, not by clock) and keeps the highest version ever
// published in a table a rebuild does not drop. Version 3 keeps a
// snapshot's membership in its watermark row (an array), so a publish is
// one INSERT; the manifest is a view over it. Version 2 had a manifest
// table written by its own statement.
const SchemaVersion = 9

// Options configure a Catalog.
type Options struct {
	// Prefix names every catalog object (config catalog.prefix); default "sluice".
	Prefix string
	Log    *slog.Logger
	// Limits bound every indexing statement and pack verification (index.go).
	Limits IndexLimits
	// ReadLimits bound every statement that reads a destination's rows
	// (Read, and exports, which page through it), so that no read can take
	// the engine's memory or hold it for long (on chDB the indexer and the
	// publisher wait behind it). 0: DefaultReadMaxMemory, DefaultReadMaxTime.
	ReadLimits IndexLimits
	// GCGrace is catalog.gc_grace: how long a continuing read of an
	// expired snapshot still reads (retention.go); default 1h.
	GCGrace time.Duration
}

// Catalog is the schema owner and the index, publish and read API over one
// Conn. It is safe for concurrent use.
type Catalog struct {
	conn   Conn
	n      names
	log    *slog.Logger
	limits IndexLimits
	// readLimits: see Options.ReadLimits.
	readLimits IndexLimits
	// gcGrace: see Options.GCGrace.
	gcGrace time.Duration

	mu     sync.Mutex // guards tables and damaged
	tables map[string]*tableState
	// damaged are the member files compaction found it cannot read
	// (Compact, CompactStats.Damaged), with the reason: later passes
	// leave the destinations whose members are in them alone.
	damaged map[PackKey]string

	// test knobs (unexported): noFence removes the lease fence and the
	// version barrier from the publishing statements (negative control);
	// beforeStatements runs between the lease renewal and the publishing
	// statements (the wedge test).
	noFence          bool
	beforeStatements func()
	// replacingInventory creates the inventory as the ReplacingMergeTree
	// of schema 6, whose merges keep the newest of duplicate rows
	// (negative control of TestReindexMergeKeepsOldSnapshots).
	replacingInventory bool
	// noRemovalCheck lets PublishReplace remove what the latest snapshot
	// does not hold (negative control of TestReplaceRefusesNonMember).
	noRemovalCheck bool
	noStaging      bool // read every pack in place (see stage.go)

	// What the last publish read back (guarded by pubMu): the highest
	// version claimed or published.
	pubMu    sync.Mutex
	pubKnown bool
	pubTop   uint64
	versions map[uint64]bool // published versions seen by reads
	// The clock window of the clockWindow test
	// knob (publish.go): the server-clock time of the last publish this
	// handle made (microseconds, 0 = none yet). clockWindow records as the
	// high-water the highest block among rows stamped within the clock
	// window instead of the highest block the statement sees (negative
	// control).
	lastPubAt   int64
	clockWindow bool
	// memberCache holds membership predicates of published versions (see
	// members); bounded, cleared when full.
	memberCache map[memberKey]memberSet
	// tableAtCache holds the schema fingerprint of a table at a published
	// version (see tableAt); bounded, cleared when full.
	tableAtCache map[tableAtKey]string
	// newest holds, per table, its newest change at the highest version
	// tableAt resolved (see newestSchema); bounded, cleared when full.
	newest map[string]newestAt
	// latestRegistration reads with the latest registration (negative
	// control of tableAt).
	latestRegistration bool
	// clearCache holds the clear predicates of published versions (see
	// clearPredicate); bounded, cleared when full.
	clearCache map[clearKey]cleared
	// ignoreClears reads as if no clear existed (negative control of the
	// clear: clear.go; SLUICE_UNSAFE_IGNORE_CLEARS in a sluice_unsafe build).
	ignoreClears bool
	// changesNoFallback makes Changes take only the members between the
	// versions as candidates across a clear or schema change too (negative
	// control of TestChangesCost).
	changesNoFallback bool
}

// tableState is what this process knows of a registered table.
type tableState struct {
	info    TableInfo
	fps     map[string]bool       // registered schema fingerprints
	infos   map[string]TableInfo  // by fingerprint (tableAt)
	columns map[string]proto.Kind // of the newest generation
}

// New returns a Catalog over conn. Call EnsureSchema before anything else.
func New(conn Conn, opts Options) *Catalog {
	if opts.Prefix == "" {
		opts.Prefix = "sluice"
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.GCGrace <= 0 {
		opts.GCGrace = time.Hour
	}
	return &Catalog{conn: conn, n: names{prefix: opts.Prefix}, log: opts.Log, limits: opts.Limits.withDefaults(), readLimits: opts.ReadLimits.readDefaults(), gcGrace: opts.GCGrace, tables: map[string]*tableState{},
		ignoreClears: unsafeIgnoreClears(opts.Log)}
}

// Conn returns the connection the catalog runs on.
func (c *Catalog) Conn() Conn { return c.conn }

// Prefix returns the object name prefix.
func (c *Catalog) Prefix() string { return c.n.prefix }

// Column is one source column of a captured table.
type Column struct {
	Name   string     `json:"name"`
	Kind   proto.Kind `json:"kind"`
	PgType string     `json:"pg_type"`
}

// TableInfo is what the read path needs to render a table: its columns in
// source order (of the latest registered schema), kinds and Postgres types,
// and its primary key.
type TableInfo struct {
	Name        string   `json:"table"`
	Columns     []Column `json:"columns"`
	PrimaryKey  []string `json:"primary_key"`
	Routing     string   `json:"routing,omitempty"`
	Fingerprint string   `json:"fingerprint"`
	// Generation numbers the rows table this schema's packs are indexed
	// into (generationOf): a column's kind or the primary key changing
	// opens the next one. 1 for the first.
	Generation int `json:"generation,omitempty"`
}

// Column returns the column called name.
func (t TableInfo) Column(name string) (Column, bool) {
	for _, c := range t.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}

// TableInfoFromSchema derives a table's catalog description from a batch or
// pack schema: every non-system field with its sluice.kind and
// sluice.pgtype metadata, and the primary key the schema metadata lists
// (proto.PrimaryKey: a list, never split from a joined string).
func TableInfoFromSchema(table string, s *arrow.Schema, fingerprint string) (TableInfo, error) {
	if err := proto.ValidateTable(table); err != nil {
		return TableInfo{}, fmt.Errorf("%w: %v", ErrBadSchema, err)
	}
	ti := TableInfo{Name: table, Fingerprint: fingerprint}
	md := s.Metadata()
	pk, err := proto.PrimaryKey(md)
	if err != nil {
		return TableInfo{}, fmt.Errorf("%w: table %s: %v", ErrBadSchema, table, err)
	}
	ti.PrimaryKey = pk
	if r, ok := md.GetValue(proto.MetaRouting); ok {
		ti.Routing = r
	}
	for _, f := range s.Fields() {
		if proto.IsSystemColumn(f.Name) {
			continue
		}
		k, err := proto.FieldKind(f)
		if err != nil {
			return TableInfo{}, fmt.Errorf("%w: table %s: %v", ErrBadSchema, table, err)
		}
		pg, _ := f.Metadata.GetValue(proto.MetaPgType)
		ti.Columns = append(ti.Columns, Column{Name: f.Name, Kind: k, PgType: pg})
	}
	if len(ti.PrimaryKey) == 0 {
		return TableInfo{}, fmt.Errorf("%w: table %s has no primary key (schema metadata %s)", ErrBadSchema, table, proto.MetaPrimaryKey)
	}
	for _, k := range ti.PrimaryKey {
		c, ok := ti.Column(k)
		if !ok {
			return TableInfo{}, fmt.Errorf("%w: table %s: primary key column %q is not a column", ErrBadSchema, table, k)
		}
		if _, isArr := c.Kind.Elem(); isArr {
			return TableInfo{}, fmt.Errorf("%w: table %s: primary key column %q is an array", ErrBadSchema, table, k)
		}
	}
	for _, sys := range []string{proto.ColOp, proto.ColLSN, proto.ColSeq} {
		if len(s.FieldIndices(sys)) != 1 {
			return TableInfo{}, fmt.Errorf("%w: table %s: rows lack system column %s", ErrBadSchema, table, sys)
		}
	}
	return ti, nil
}

func (t TableInfo) isKey(col string) bool { return slices.Contains(t.PrimaryKey, col) }

// ---- schema creation and refusal ----

type object struct {
	name, engine string
	rows         uint64
}

func (c *Catalog) objects(ctx context.Context) (map[string]object, error) {
	// The version floor is not an object of the schema: it outlives every
	// drop and rebuild (rebuild.go), so the checks and Drop never see it.
	res, err := c.conn.Query(ctx, "SELECT name, engine, ifNull(total_rows, 0) FROM system.tables WHERE database = currentDatabase() AND startsWith(name, "+quote(c.n.prefix+"_")+") AND name != "+quote(c.n.versionFloor()))
	if err != nil {
		return nil, fmt.Errorf("listing catalog objects: %w", err)
	}
	out := map[string]object{}
	for _, r := range res.Rows {
		o := object{name: asString(r[0]), engine: asString(r[1]), rows: asUint(r[2])}
		out[o.name] = o
	}
	return out, nil
}

func (c *Catalog) rebuildHint() string {
	return fmt.Sprintf("The catalog is a projection of the pack store and is never migrated in place. "+
		"Rebuild it: stop every indexer and publisher, then run `sluice catalog rebuild` "+
		"(it drops every %s_* object but the version floor, which keeps versions from repeating, and re-indexes every pack from the pack store), "+
		"or drop every table and view named %s_* yourself and start the indexer, whose reconciler re-indexes the pack store; "+
		"then restart the publisher.", c.n.prefix, c.n.prefix)
}

func (c *Catalog) refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s. %s", ErrSchemaRefused, fmt.Sprintf(format, args...), c.rebuildHint())
}

// EnsureSchema checks the catalog and creates what is missing. It refuses,
// before any DDL, a catalog stamped with a version this build does not read,
// an unstamped catalog that holds data, a stamped one that lacks a table,
// and one whose inventory has lost its membership or its rows. The stamp is
// written last, so a stamp means every object exists.
func (c *Catalog) EnsureSchema(ctx context.Context) error {
	objs, err := c.objects(ctx)
	if err != nil {
		return err
	}
	if err := c.check(ctx, objs); err != nil {
		return err
	}
	return c.create(ctx)
}

func (c *Catalog) check(ctx context.Context, objs map[string]object) error {
	if len(objs) == 0 {
		return nil // fresh
	}
	var found []string
	var holding int
	for name, o := range objs {
		found = append(found, name)
		if o.rows > 0 {
			holding++
		}
	}
	sort.Strings(found)
	_, hasStamp := objs[c.n.stamp()]
	var versions []uint64
	if hasStamp {
		res, err := c.conn.Query(ctx, "SELECT DISTINCT version FROM "+ident(c.n.stamp())+" ORDER BY version")
		if err != nil {
			return fmt.Errorf("reading schema stamp: %w", err)
		}
		for _, r := range res.Rows {
			versions = append(versions, asUint(r[0]))
		}
	}
	if len(versions) == 0 {
		if holding == 0 {
			// An install of this build that stopped before stamping, over
			// empty tables: re-running the idempotent DDL is the repair.
			return nil
		}
		return c.refuse("catalog with prefix %q carries no schema stamp (%s is %s) but is not empty: found %s, %d of them holding rows; this build creates and reads schema version %d",
			c.n.prefix, c.n.stamp(), map[bool]string{true: "empty", false: "absent"}[hasStamp], strings.Join(found, ", "), holding, SchemaVersion)
	}
	if len(versions) != 1 || versions[0] != SchemaVersion {
		return c.refuse("catalog with prefix %q is stamped with schema version %v; this build reads only version %d", c.n.prefix, versions, SchemaVersion)
	}
	var missing []string
	for _, t := range c.n.fixedTables() {
		if _, ok := objs[t]; !ok {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return c.refuse("catalog with prefix %q is stamped version %d but lacks %s", c.n.prefix, SchemaVersion, strings.Join(missing, ", "))
	}
	// Every registered table's rows table must exist.
	res, err := c.conn.Query(ctx, "SELECT DISTINCT table, generation FROM "+ident(c.n.tables())+" ORDER BY table, generation")
	if err != nil {
		return fmt.Errorf("reading table registry: %w", err)
	}
	for _, r := range res.Rows {
		rt := c.n.rowsGen(asString(r[0]), int(asUint(r[1])))
		if _, ok := objs[rt]; !ok {
			missing = append(missing, rt)
		}
	}
	if len(missing) > 0 {
		return c.refuse("catalog with prefix %q registers tables whose rows tables are missing: %s", c.n.prefix, strings.Join(missing, ", "))
	}
	// Inventory without membership: snapshots holding packs were published
	// and packs indexed, yet no inventory row is at or below the latest
	// snapshot's high-water (its members). Reads pinned at those snapshots
	// would silently become empty. Only snapshots that claim packs count: a
	// catalog whose snapshots so far hold none (the first publish of an
	// empty source) and that has since indexed packs not yet published is
	// the ordinary state of a crash between indexing and the next publish.
	res, err = c.conn.Query(ctx, fmt.Sprintf(
		"WITH (SELECT max(inventory_block) FROM %[2]s) AS hw SELECT (SELECT count() FROM %[1]s), (SELECT count() FROM %[2]s WHERE packs > 0), (SELECT count() FROM %[1]s WHERE _block_number <= hw)",
		ident(c.n.packs()), ident(c.n.watermark())))
	if err != nil {
		return fmt.Errorf("checking membership: %w", err)
	}
	inv, wm, members := asUint(res.Rows[0][0]), asUint(res.Rows[0][1]), asUint(res.Rows[0][2])
	if inv > 0 && wm > 0 && members == 0 {
		return c.refuse("catalog with prefix %q has an inventory without membership: %d inventory rows and %d published snapshots holding packs, but no inventory row is at or below the latest snapshot's inventory high-water",
			c.n.prefix, inv, wm)
	}
	// Inventory without rows: the indexer skips packs in the inventory, so
	// an inventory that outlived its rows tables would hide those packs
	// forever.
	res, err = c.conn.Query(ctx, "SELECT p.table, ifNull(t.generation, 1), count(DISTINCT p.store_id, p.pack_id, p.destination) FROM "+ident(c.n.packs())+
		" AS p LEFT JOIN (SELECT table, fingerprint, any(generation) AS generation FROM "+ident(c.n.tables())+" GROUP BY table, fingerprint) AS t ON p.table = t.table AND p.fingerprint = t.fingerprint"+
		" WHERE p.rows > 0 GROUP BY p.table, ifNull(t.generation, 1) ORDER BY 1, 2 SETTINGS join_use_nulls = 1")
	if err != nil {
		return fmt.Errorf("checking inventory: %w", err)
	}
	var empty []string
	for _, r := range res.Rows {
		rt := c.n.rowsGen(asString(r[0]), int(asUint(r[1])))
		o, ok := objs[rt]
		if !ok || o.rows == 0 {
			empty = append(empty, fmt.Sprintf("%s (%d packs in the inventory)", rt, asUint(r[2])))
		}
	}
	if len(empty) > 0 {
		return c.refuse("catalog with prefix %q has an inventory without rows: %s hold no rows", c.n.prefix, strings.Join(empty, ", "))
	}
	return nil
}

func (c *Catalog) create(ctx context.Context) error {
	n := c.n
	ddl := []string{
		"CREATE TABLE IF NOT EXISTS " + ident(n.stamp()) + " (version UInt32, stamped_at Int64) ENGINE = MergeTree ORDER BY version",
		"CREATE TABLE IF NOT EXISTS " + ident(n.tables()) + ` (
			table String, fingerprint String, columns String, primary_key Array(String), routing String,
			registered_at Int64, generation UInt32) ENGINE = ReplacingMergeTree ORDER BY (table, fingerprint)`,
		// The inventory's sort key starts with the pack (the indexer's
		// lookups); a read's membership filters one destination, and the
		// bloom filter on destination lets it skip the granules of other
		// destinations' packs and segments (BenchmarkWideHistory: the
		// membership of one destination among 10,000-destination segments
		// 45 ms without it, 10 ms with it).
		"CREATE TABLE IF NOT EXISTS " + ident(n.packs()) + ` (
			store_id String, pack_id String, destination String, table String, path String, fingerprint String,
			first_lsn UInt64, first_seq UInt64, last_lsn UInt64, last_seq UInt64,
			rows Int64, tombstones Int64, bytes Int64, indexed_at Int64, trace String DEFAULT '',
			INDEX dest destination TYPE bloom_filter(0.01) GRANULARITY 1)
			ENGINE = ` + c.inventoryEngine() + ` ORDER BY (store_id, pack_id, destination) SETTINGS enable_block_number_column = 1`,
		// One row per published snapshot. A publish is one INSERT of one
		// row, one part: the row is the snapshot. Its membership is implied,
		// not listed: inventory_block is the inventory high-water, and every
		// inventory row at or below that block is a member of this snapshot
		// or an earlier one (publish.go, "The admitted set"), minus the
		// members removed (removed, written only by a compaction or purge
		// publish, PublishReplace) by any publish at or below it. removes is
		// the length of removed, and its skip index lets the removal sets be
		// read from the rows that have one, without reading every row.
		// lease_term and lease_expires record the lease head the publish's
		// fence passed on (its own renewal), so a publish reads back the
		// lease it left from this row alone; packs is the snapshot's member
		// count. The inventory persists its block numbers
		// (enable_block_number_column) so that merges keep them. A small
		// index granularity: a read resolves its version's row by the sort
		// key, and with large granules that point read would grow with the
		// number of snapshots.
		"CREATE TABLE IF NOT EXISTS " + ident(n.watermark()) + ` (
			version UInt64, publish_id String, published_at Int64, through_lsn UInt64, new_packs UInt64, packs UInt64,
			lease_id String, holder String, lease_term UInt64, lease_expires Int64,
			inventory_block UInt64, removes UInt64 DEFAULT 0, removed Array(Tuple(String, String, String, String)) DEFAULT [],
			INDEX removals removes TYPE minmax GRANULARITY 1)
			ENGINE = MergeTree ORDER BY (version, publish_id) SETTINGS index_granularity = 64`,
		// The lease table also holds the version claims (a publish's renewal
		// row carries its claim). It is coordination state, not data: an
		// in-memory table, so a renewal and claim costs no part write (a
		// MergeTree insert creates about ten files), bounded to its newest
		// rows. Losing it (a server or engine restart) fails safe: every
		// fence needs the caller's row at the head, so every holder stops,
		// one acquires again, and the version barrier over the durable
		// watermark keeps versions above every published one.
		"CREATE TABLE IF NOT EXISTS " + ident(n.lease()) + ` (
			term UInt64, lease_id String, holder String, acquired_at Int64, expires_at Int64,
			version UInt64 DEFAULT 0, claim_id String DEFAULT '')
			ENGINE = Memory SETTINGS max_rows_to_keep = ` + strconv.Itoa(leaseRowsKept),
		"CREATE OR REPLACE VIEW " + ident(n.snapshots()) + " AS " + c.snapshotsSQL(),
		versionFloorDDL(n),
	}
	ddl = append(ddl, retentionDDL(n)...)
	ddl = append(ddl, purgeDDL(n))
	for _, q := range ddl {
		if err := c.conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("creating catalog schema: %w", err)
		}
	}
	if err := c.loadTables(ctx, true); err != nil {
		return err
	}
	// The stamp, last and conditional: two starting replicas may both write
	// it; they write the same row.
	q := fmt.Sprintf("INSERT INTO %s (version, stamped_at) SELECT %d, toUnixTimestamp64Micro(now64(6)) WHERE (SELECT count() FROM %s) = 0",
		ident(n.stamp()), SchemaVersion, ident(n.stamp()))
	if err := c.conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("stamping catalog schema: %w", err)
	}
	return nil
}

// inventoryEngine is the inventory's engine: a plain MergeTree, which
// keeps every row it is given. A pack indexed twice (two indexers, or a
// retry after a crash between the rows and the inventory) has two rows;
// the first is the member, at the block it was admitted under. A
// ReplacingMergeTree on (store_id, pack_id, destination) would fold them
// in a merge and may keep the later row, moving an old member above the
// high-water of the snapshots that admitted it: those would read without
// it. Every read of the inventory takes the rows at or below a high-water
// and is indifferent to copies (DISTINCT, IN).
func (c *Catalog) inventoryEngine() string {
	if c.replacingInventory {
		return "ReplacingMergeTree"
	}
	return "MergeTree"
}

func (c *Catalog) snapshotsSQL() string {
	// new_packs counts the members the publish admitted, (pack,
	// destination) rows (a segment is one per destination it holds);
	// packs, the snapshot's members, is recorded by the row.
	return fmt.Sprintf(`SELECT version, publish_id, published_at AS published_at_us, through_lsn, new_packs, packs, removes
		FROM %s`, ident(c.n.watermark()))
}

// Drop removes every object of the catalog's prefix (views first). It is the
// first half of Rebuild.
func (c *Catalog) Drop(ctx context.Context) error {
	objs, err := c.objects(ctx)
	if err != nil {
		return err
	}
	var views, tables []string
	for name, o := range objs {
		if o.engine == "View" || o.engine == "MaterializedView" {
			views = append(views, name)
		} else {
			tables = append(tables, name)
		}
	}
	sort.Strings(views)
	sort.Strings(tables)
	for _, v := range views {
		if err := c.conn.Exec(ctx, "DROP VIEW IF EXISTS "+ident(v)); err != nil {
			return fmt.Errorf("dropping %s: %w", v, err)
		}
	}
	for _, t := range tables {
		if err := c.conn.Exec(ctx, "DROP TABLE IF EXISTS "+ident(t)); err != nil {
			return fmt.Errorf("dropping %s: %w", t, err)
		}
	}
	c.mu.Lock()
	c.tables = map[string]*tableState{}
	c.mu.Unlock()
	c.pubMu.Lock()
	c.pubKnown, c.pubTop, c.versions, c.memberCache, c.clearCache = false, 0, nil, nil, nil
	c.tableAtCache, c.newest = nil, nil
	c.lastPubAt = 0
	c.pubMu.Unlock()
	return nil
}

// ---- table registry ----

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func asUint(v any) uint64 {
	switch x := v.(type) {
	case uint64:
		return x
	case int64:
		return uint64(x)
	case float64:
		return uint64(x)
	}
	return 0
}

func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case uint64:
		return int64(x)
	case float64:
		return int64(x)
	}
	return 0
}

func asStrings(v any) []string {
	arr, _ := v.([]any)
	out := make([]string, 0, len(arr))
	for _, a := range arr {
		out = append(out, asString(a))
	}
	return out
}

var errNoRows = errors.New("query returned no rows")
