package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-cdc/sluice/proto"
)

// Config is the whole of sluice's configuration. Every service reads the
// sections it needs from the same file.
type Config struct {
	Source       Source       `yaml:"source"`
	Destinations Destinations `yaml:"destinations"`
	NATS         NATS         `yaml:"nats"`
	State        State        `yaml:"state"`
	Catalog      Catalog      `yaml:"catalog"`
	Packs        Packs        `yaml:"packs"`
	DataDir      string       `yaml:"data_dir"`
	Reader       Reader       `yaml:"reader"`
	Router       Router       `yaml:"router"`
	Delivery     Delivery     `yaml:"delivery"`
	Indexer      Indexer      `yaml:"indexer"`
	Publisher    Publisher    `yaml:"publisher"`
	HTTP         HTTP         `yaml:"http"`
	Telemetry    Telemetry    `yaml:"telemetry"`
	Demo         Demo         `yaml:"demo"`
}

// Source is the Postgres database sluice captures.
type Source struct {
	// DSN of the source; empty in `sluice dev` starts a private demo cluster.
	// A password may come only from the environment (SLUICE_SOURCE_DSN or
	// PGPASSWORD).
	DSN    string   `yaml:"dsn" secret:"password"`
	Tables []string `yaml:"tables"`
	// RoutingColumn names the tenant column of every table; RoutingColumns
	// overrides it per table.
	RoutingColumn  string            `yaml:"routing_column"`
	RoutingColumns map[string]string `yaml:"routing_columns"`
	Slot           string            `yaml:"slot"`
	Publication    string            `yaml:"publication"`
	Backfill       bool              `yaml:"backfill"`
	// ResyncChunkRows is the primary-key chunk a live resync copies between
	// two watermarks (sluice resync): its memory bound (default 4096).
	ResyncChunkRows int `yaml:"resync_chunk_rows"`
}

// RoutingColumnOf returns the routing column of a table.
func (s Source) RoutingColumnOf(table string) string {
	if c, ok := s.RoutingColumns[table]; ok {
		return c
	}
	return s.RoutingColumn
}

// Destinations says how routing values become destinations.
type Destinations struct {
	Mode string `yaml:"mode"` // auto | list
	// List maps a routing value's text form to a destination name (mode list).
	List map[string]string `yaml:"list"`
	// Unlisted is what mode list does with a value that is not listed:
	// dlq (dead-letter it) or drop (count and drop it).
	Unlisted string `yaml:"unlisted"`
	// StatePoll is how often the router and the flusher re-read the
	// destination lifecycle states (sluice destinations pause|resume|
	// drain|retire) from the state database (default 1s).
	StatePoll time.Duration `yaml:"state_poll"`
}

// NATS is the message bus.
type NATS struct {
	URL string `yaml:"url"` // embedded, or nats://host:4222[,nats://...]
	// Credentials: a creds file path, or user/password or token, only from the
	// environment (SLUICE_NATS_CREDS, SLUICE_NATS_USER, SLUICE_NATS_PASSWORD,
	// SLUICE_NATS_TOKEN).
	Creds    string `yaml:"creds" secret:"env"`
	User     string `yaml:"user" secret:"env"`
	Password string `yaml:"password" secret:"env"`
	Token    string `yaml:"token" secret:"env"`
	TLSCA    string `yaml:"tls_ca"`
	TLSCert  string `yaml:"tls_cert"`
	TLSKey   string `yaml:"tls_key"`
	// Replicas of every stream: 1 embedded, 3 on a cluster.
	Replicas int `yaml:"replicas"`
	// MaxPayload is the largest message sluice publishes; batches are cut to
	// stay below it. The embedded server is started with it.
	MaxPayload ByteSize `yaml:"max_payload"`
	// MaxAge and MaxBytes bound each data stream. Publishes are refused (and
	// retried with backoff) when a stream is full: nothing is dropped.
	MaxAge   time.Duration `yaml:"max_age"`
	MaxBytes ByteSize      `yaml:"max_bytes"`
	// SyncAlways makes the embedded server fsync every write (sync_interval:
	// always); without it an acked publish survives a process kill, not a
	// power loss.
	SyncAlways bool `yaml:"sync_always"`
	// Listen is the client address of the embedded server (nats.url:
	// embedded), so the nats CLI can be pointed at `sluice dev`; a taken
	// port falls back to a free one (logged). Port 0 picks a free port.
	Listen string `yaml:"listen"`
	// Monitor is the embedded server's monitoring address (/varz, /jsz,
	// /connz); empty turns it off. A taken port falls back to a free one.
	Monitor string `yaml:"monitor"`
	// InsecureNoAuth lets the embedded server listen, or serve monitoring,
	// on a non-loopback address without NATS auth (nats.user and
	// nats.password, or nats.token); without it that is refused. The
	// monitoring endpoint has no auth of its own: a non-loopback
	// nats.monitor always needs this.
	InsecureNoAuth bool `yaml:"insecure_no_auth"`
}

// State is where cursors and leases live.
type State struct {
	DSN    string `yaml:"dsn" secret:"password"` // empty: the source database
	Schema string `yaml:"schema"`
}

// Catalog is the ClickHouse catalog.
type Catalog struct {
	URL      string `yaml:"url" secret:"password"` // embedded | clickhouse://host:9000/db | http://host:8123/db
	User     string `yaml:"user" secret:"env"`
	Password string `yaml:"password" secret:"env"`
	TLSCA    string `yaml:"tls_ca"`
	Prefix   string `yaml:"prefix"` // table name prefix, default "sluice"
	// InsecureNoTLS lets sluice send the pack store's S3 keys (inside the
	// s3() table functions of its indexing statements) to a ClickHouse
	// server over a connection without TLS on a non-loopback host; without
	// it such a configuration is refused.
	InsecureNoTLS bool `yaml:"insecure_no_tls"`
	// Cluster, when set, names the ClickHouse cluster (remote_servers) the
	// catalog's DDL runs ON CLUSTER, with Replicated*MergeTree engines
	// (catalog.OnCluster); a ClickHouse server only.
	Cluster string `yaml:"cluster"`
	// SnapshotRetention: a snapshot published longer ago than this expires
	// unless pinned or among the newest SnapshotRetainMin (default 24h).
	SnapshotRetention time.Duration `yaml:"snapshot_retention"`
	// SnapshotRetainMin: the newest this many snapshots never expire
	// (default 100, at least 1, so the latest is always retained).
	SnapshotRetainMin int `yaml:"snapshot_retain_min"`
	// GCGrace: how long after a snapshot expires a read that started on it
	// may still continue (its later pages), and the least age of anything
	// garbage collection may delete (default 1h).
	GCGrace time.Duration `yaml:"gc_grace"`
	// CompactInterval: how often the active publisher runs one compaction
	// pass (default 1m).
	CompactInterval time.Duration `yaml:"compact_interval"`
	// CompactMinPacks: a destination's table with at least this many
	// members is compacted (default 16, at least 2).
	CompactMinPacks int `yaml:"compact_min_packs"`
	// CompactSmallBytes: a member below this size is small (a shared
	// segment's member counts its destination's share of the file); a
	// destination's table whose small members add up to it is compacted
	// too (default 8 MiB).
	CompactSmallBytes int64 `yaml:"compact_small_bytes"`
	// CompactMaxBytes bounds the bytes of the member files one compaction
	// pass reads, each file counted once however many of the pass's
	// destinations it holds (default 256 MiB).
	CompactMaxBytes int64 `yaml:"compact_max_bytes"`
	// GCInterval: how often the active publisher runs one garbage
	// collection pass (default 1m).
	GCInterval time.Duration `yaml:"gc_interval"`
	// ClaimsGrace: the least age of a claim-check object (.claims/, values
	// carried by reference) that garbage collection may delete, and how
	// long a dead letter's claims stay protected after it leaves the DLQ
	// (a replay in flight); default 24h, at least 5m; a value below
	// nats.max_age counts as nats.max_age (EffectiveClaimsGrace,
	// docs/adr/0033-claim-gc.md).
	ClaimsGrace time.Duration `yaml:"claims_grace"`
}

// Packs is the pack store.
type Packs struct {
	URL string `yaml:"url"` // empty: <data_dir>/packs; or s3://bucket/prefix
	// S3 settings (S3 credentials only from the environment:
	// SLUICE_PACKS_ACCESS_KEY, SLUICE_PACKS_SECRET_KEY).
	Endpoint  string `yaml:"endpoint"`
	Region    string `yaml:"region"`
	AccessKey string `yaml:"access_key" secret:"env"`
	SecretKey string `yaml:"secret_key" secret:"env"`
	StoreID   string `yaml:"store_id"` // identity of this store in pack ids; default derived from the URL
	// TLSCA is a PEM bundle of the CAs that sign the S3 endpoint's
	// certificate (an https:// endpoint with a private CA).
	TLSCA string `yaml:"tls_ca"`
}

// Reader is the capture service.
type Reader struct {
	BatchRows       int           `yaml:"batch_rows"`
	BatchBytes      ByteSize      `yaml:"batch_bytes"`
	BatchInterval   time.Duration `yaml:"batch_interval"`
	MaxInFlight     int           `yaml:"max_in_flight"`
	AckWait         time.Duration `yaml:"ack_wait"` // how long a publish waits for its PubAck before the session restarts
	StatusInterval  time.Duration `yaml:"status_interval"`
	LeaseTTL        time.Duration `yaml:"lease_ttl"`
	BackfillWorkers int           `yaml:"backfill_workers"`
	// MaxInlineValue is the largest value a change carries inline; a longer
	// one travels by reference through the pack store (a claim check,
	// proto.ColClaims). At most a quarter of nats.max_payload is used; 0
	// carries every value inline (a row over nats.max_payload halts its
	// table).
	MaxInlineValue ByteSize `yaml:"max_inline_value"`
}

// Router is the routing service.
type Router struct {
	Workers       int `yaml:"workers"`
	MaxAckPending int `yaml:"max_ack_pending"`
}

// Delivery is the flusher.
type Delivery struct {
	FlushInterval time.Duration `yaml:"flush_interval"`
	Partitions    int           `yaml:"partitions"`
	Workers       int           `yaml:"workers"`
	FlushRows     int           `yaml:"flush_rows"`
	FlushBytes    ByteSize      `yaml:"flush_bytes"`
	MemoryBudget  ByteSize      `yaml:"memory_budget"`
	DrainTimeout  time.Duration `yaml:"drain_timeout"`
	LeaseTTL      time.Duration `yaml:"lease_ttl"`
	MaxAckPending int           `yaml:"max_ack_pending"`
	// IdleEvict is how long a destination with nothing buffered, pending
	// or in flight stays in the flusher's memory; past it, it is dropped
	// and its cursor reloaded from the state database when it reappears.
	// Over MemoryBudget (each destination in memory counts 1 KiB of it)
	// idle destinations are dropped at once.
	IdleEvict time.Duration `yaml:"idle_evict"`
}

// Indexer is the catalog indexer.
type Indexer struct {
	BatchRows         int           `yaml:"batch_rows"`
	BatchWait         time.Duration `yaml:"batch_wait"`
	ReconcileInterval time.Duration `yaml:"reconcile_interval"`
	// MaxMemory bounds one indexing statement in the catalog engine
	// (max_memory_usage) and what verifying one pack may allocate at a time.
	MaxMemory ByteSize `yaml:"max_memory"`
	// MaxStatementTime bounds one indexing statement (max_execution_time,
	// whole seconds).
	MaxStatementTime time.Duration `yaml:"max_statement_time"`
}

// Publisher publishes catalog snapshots.
type Publisher struct {
	Interval time.Duration `yaml:"interval"`
	LeaseTTL time.Duration `yaml:"lease_ttl"`
}

// HTTP is the status page and API server.
type HTTP struct {
	Listen string `yaml:"listen"`
	// Token, when set (only from SLUICE_HTTP_TOKEN, or read from
	// TokenFile), is required as a bearer token on every path but /healthz
	// and /readyz.
	Token string `yaml:"token" secret:"env"`
	// TokenFile names a file holding the token (surrounding white space
	// ignored), e.g. one generated into a volume shared by containers.
	TokenFile string `yaml:"token_file"`
	// InsecureNoAuth lets the API listen on a non-loopback address without
	// a token (a warning is logged at start); without it that is refused.
	InsecureNoAuth bool `yaml:"insecure_no_auth"`
	// Pprof mounts net/http/pprof under /debug/pprof/ (behind the token
	// when one is set); off by default.
	Pprof bool `yaml:"pprof"`
}

// Telemetry is logs, traces and metrics.
type Telemetry struct {
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	LogLevel     string `yaml:"log_level"`
	LogFormat    string `yaml:"log_format"` // auto (text on a terminal, JSON otherwise) | json | text
	// JaegerUI is the base URL of Jaeger's UI and query API (e.g.
	// http://127.0.0.1:16686); `sluice trace` reads spans from it and the
	// start-up summary prints it; the web UI links a destination's pack
	// traces there.
	JaegerUI string `yaml:"jaeger_ui"`
}

// Demo is the demo schema and traffic of `sluice dev` without a source.
type Demo struct {
	Tenants int     `yaml:"tenants"`
	Rate    float64 `yaml:"rate"` // transactions per second
}

// Default returns the configuration every file starts from.
func Default() Config {
	return Config{
		Source: Source{
			RoutingColumn:   "tenant_id",
			Slot:            "sluice",
			ResyncChunkRows: 4096,
			Publication:     "sluice",
		},
		Destinations: Destinations{Mode: "auto", Unlisted: "dlq", StatePoll: time.Second},
		NATS: NATS{
			URL:        "embedded",
			Replicas:   1,
			MaxPayload: 8 << 20,
			MaxAge:     24 * time.Hour,
			MaxBytes:   2 << 30,
			Listen:     "127.0.0.1:4222",
			Monitor:    "127.0.0.1:8222",
		},
		State: State{Schema: "sluice"},
		Catalog: Catalog{URL: "embedded", Prefix: "sluice", SnapshotRetention: 24 * time.Hour, SnapshotRetainMin: 100, GCGrace: time.Hour,
			CompactInterval: time.Minute, CompactMinPacks: 16, CompactSmallBytes: 8 << 20, CompactMaxBytes: 256 << 20, GCInterval: time.Minute,
			ClaimsGrace: 24 * time.Hour},
		DataDir: "./.sluice",
		Reader: Reader{
			BatchRows:       10000,
			BatchBytes:      4 << 20,
			BatchInterval:   200 * time.Millisecond,
			MaxInFlight:     64,
			AckWait:         30 * time.Second,
			StatusInterval:  time.Second,
			LeaseTTL:        10 * time.Second,
			BackfillWorkers: 4,
			MaxInlineValue:  1 << 20,
		},
		Router: Router{Workers: 2, MaxAckPending: 256},
		Delivery: Delivery{
			FlushInterval: 60 * time.Second,
			Partitions:    16,
			Workers:       8,
			FlushRows:     100000,
			FlushBytes:    64 << 20,
			MemoryBudget:  512 << 20,
			DrainTimeout:  30 * time.Second,
			LeaseTTL:      15 * time.Second,
			MaxAckPending: 20000,
			IdleEvict:     5 * time.Minute,
		},
		Indexer: Indexer{
			BatchRows:         50000,
			BatchWait:         200 * time.Millisecond,
			ReconcileInterval: time.Minute,
			MaxMemory:         1 << 30,
			MaxStatementTime:  30 * time.Second,
		},
		Publisher: Publisher{Interval: time.Second, LeaseTTL: 10 * time.Second},
		HTTP:      HTTP{Listen: "127.0.0.1:8080"},
		Telemetry: Telemetry{LogLevel: "info", LogFormat: "auto"},
		Demo:      Demo{Tenants: 300, Rate: 20},
	}
}

// Load reads path (a missing file is an error unless allowMissing), applies
// the environment and validates.
func Load(path string, allowMissing bool) (Config, error) {
	cfg := Default()
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := decode(b, &cfg); err != nil {
			return Config{}, fmt.Errorf("reading %s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist) && allowMissing:
	default:
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	if err := applyEnv(&cfg, os.LookupEnv); err != nil {
		return Config{}, err
	}
	if err := cfg.readTokenFile(); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Parse decodes YAML text onto the defaults and validates, without the
// environment. Tests and fuzzing use it.
func Parse(text []byte) (Config, error) {
	cfg := Default()
	if err := decode(text, &cfg); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func decode(b []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return namedKeyError(b, err)
	}
	return checkSecretsInFile(b)
}

// namedKeyError turns the YAML decoder's first type error ("line 5: cannot
// unmarshal !!str `soon` into time.Duration", "line 3: field foo not found
// in type config.Delivery") into a KeyError naming the dotted key on that
// line (delivery.flush_interval). Other errors pass through.
func namedKeyError(b []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return err
	}
	lineText, msg, ok := strings.Cut(strings.TrimPrefix(te.Errors[0], "line "), ": ")
	line, convErr := strconv.Atoi(lineText)
	if !ok || convErr != nil {
		return err
	}
	key := keyLines(b)[line]
	if key == "" {
		return err
	}
	if strings.HasPrefix(msg, "field ") && strings.Contains(msg, " not found in type ") {
		msg = "unknown key"
	}
	msg += fmt.Sprintf(" (line %d)", line)
	if n := len(te.Errors) - 1; n > 0 {
		msg += fmt.Sprintf("; and %d more", n)
	}
	return &KeyError{Key: key, Msg: msg}
}

// keyLines maps each line of a YAML document that holds a mapping key, or
// a value on a line of its own, to the key's dotted path.
func keyLines(b []byte) map[int]string {
	var root yaml.Node
	if yaml.Unmarshal(b, &root) != nil {
		return nil
	}
	lines := map[int]string{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				lines[k.Line] = p
				if _, ok := lines[v.Line]; !ok {
					lines[v.Line] = p
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				if _, ok := lines[c.Line]; !ok {
					lines[c.Line] = path
				}
				walk(c, path)
			}
		}
	}
	walk(&root, "")
	return lines
}

// KeyError names a configuration key and what is wrong with it.
type KeyError struct {
	Key string // e.g. delivery.flush_interval
	Msg string
}

func (e *KeyError) Error() string { return "config key " + e.Key + ": " + e.Msg }

func bad(key, format string, args ...any) error {
	return &KeyError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// EffectiveClaimsGrace is catalog.claims_grace, raised to nats.max_age:
// a backfill or resync batch can wait in a stream that long, its claims
// older than its stream position (docs/adr/0033-claim-gc.md).
func (c Catalog) EffectiveClaimsGrace(n NATS) time.Duration { return max(c.ClaimsGrace, n.MaxAge) }

// Validate checks every key and returns the first error, naming the key.
func (c *Config) Validate() error {
	if len(c.Source.Tables) == 0 && c.Source.DSN != "" {
		return bad("source.tables", "list at least one table to capture (schema.table)")
	}
	seen := map[string]bool{}
	for _, t := range c.Source.Tables {
		if err := proto.ValidateTable(t); err != nil {
			return bad("source.tables", "%v", err)
		}
		if seen[t] {
			return bad("source.tables", "table %s is listed twice", t)
		}
		seen[t] = true
	}
	if !identRe.MatchString(c.Source.RoutingColumn) {
		return bad("source.routing_column", "%q is not a lowercase unquoted Postgres identifier", c.Source.RoutingColumn)
	}
	for t, col := range c.Source.RoutingColumns {
		if !seen[t] {
			return bad("source.routing_columns", "table %s is not in source.tables", t)
		}
		if !identRe.MatchString(col) {
			return bad("source.routing_columns", "%s: %q is not a lowercase unquoted Postgres identifier", t, col)
		}
	}
	if !identRe.MatchString(c.Source.Slot) {
		return bad("source.slot", "%q is not a valid slot name (lowercase letters, digits, _)", c.Source.Slot)
	}
	if !identRe.MatchString(c.Source.Publication) {
		return bad("source.publication", "%q is not a valid publication name (lowercase letters, digits, _)", c.Source.Publication)
	}
	if err := checkDSN("source.dsn", c.Source.DSN); err != nil {
		return err
	}
	if err := checkDSN("state.dsn", c.State.DSN); err != nil {
		return err
	}
	if !identRe.MatchString(c.State.Schema) {
		return bad("state.schema", "%q is not a lowercase unquoted Postgres identifier", c.State.Schema)
	}
	switch c.Destinations.Mode {
	case "auto":
	case "list":
		if len(c.Destinations.List) == 0 {
			return bad("destinations.list", "mode list needs at least one value: name entry")
		}
		for v, name := range c.Destinations.List {
			if err := proto.ValidateDestination(name); err != nil {
				return bad("destinations.list", "value %q: %v", v, err)
			}
		}
	default:
		return bad("destinations.mode", "%q: want auto or list", c.Destinations.Mode)
	}
	if c.Destinations.Unlisted != "dlq" && c.Destinations.Unlisted != "drop" {
		return bad("destinations.unlisted", "%q: want dlq or drop", c.Destinations.Unlisted)
	}
	if c.NATS.URL != "embedded" {
		if err := checkURL("nats.url", c.NATS.URL, "nats", "tls", "ws", "wss"); err != nil {
			return err
		}
	}
	if c.NATS.Replicas != 1 && c.NATS.Replicas != 3 && c.NATS.Replicas != 5 {
		return bad("nats.replicas", "%d: want 1, 3 or 5", c.NATS.Replicas)
	}
	if c.NATS.MaxPayload < 64<<10 || c.NATS.MaxPayload > 64<<20 {
		return bad("nats.max_payload", "%d bytes: want between 64KiB and 64MiB", c.NATS.MaxPayload)
	}
	if c.Catalog.URL != "embedded" {
		if err := checkURL("catalog.url", c.Catalog.URL, "clickhouse", "http", "https"); err != nil {
			return err
		}
	}
	if c.Catalog.Cluster != "" && (c.Catalog.URL == "embedded" || !clusterRe.MatchString(c.Catalog.Cluster)) {
		return bad("catalog.cluster", "%q: a cluster name (letters, digits, _ and -) of a ClickHouse server's remote_servers; the embedded catalog has none", c.Catalog.Cluster)
	}
	if !identRe.MatchString(c.Catalog.Prefix) {
		return bad("catalog.prefix", "%q: lowercase letters, digits and _", c.Catalog.Prefix)
	}
	if c.Packs.URL != "" {
		if err := checkURL("packs.url", c.Packs.URL, "s3", "file"); err != nil {
			return err
		}
	}
	if c.DataDir == "" {
		return bad("data_dir", "must not be empty")
	}
	if err := c.checkExposure(); err != nil {
		return err
	}
	type pos struct {
		key string
		v   int64
	}
	for _, p := range []pos{
		{"reader.batch_rows", int64(c.Reader.BatchRows)},
		{"source.resync_chunk_rows", int64(c.Source.ResyncChunkRows)},
		{"reader.batch_bytes", int64(c.Reader.BatchBytes)},
		{"reader.batch_interval", int64(c.Reader.BatchInterval)},
		{"reader.max_in_flight", int64(c.Reader.MaxInFlight)},
		{"reader.ack_wait", int64(c.Reader.AckWait)},
		{"reader.status_interval", int64(c.Reader.StatusInterval)},
		{"reader.lease_ttl", int64(c.Reader.LeaseTTL)},
		{"reader.backfill_workers", int64(c.Reader.BackfillWorkers)},
		{"destinations.state_poll", int64(c.Destinations.StatePoll)},
		{"router.workers", int64(c.Router.Workers)},
		{"router.max_ack_pending", int64(c.Router.MaxAckPending)},
		{"delivery.flush_interval", int64(c.Delivery.FlushInterval)},
		{"delivery.partitions", int64(c.Delivery.Partitions)},
		{"delivery.workers", int64(c.Delivery.Workers)},
		{"delivery.flush_rows", int64(c.Delivery.FlushRows)},
		{"delivery.flush_bytes", int64(c.Delivery.FlushBytes)},
		{"delivery.memory_budget", int64(c.Delivery.MemoryBudget)},
		{"delivery.drain_timeout", int64(c.Delivery.DrainTimeout)},
		{"delivery.lease_ttl", int64(c.Delivery.LeaseTTL)},
		{"delivery.max_ack_pending", int64(c.Delivery.MaxAckPending)},
		{"delivery.idle_evict", int64(c.Delivery.IdleEvict)},
		{"indexer.batch_rows", int64(c.Indexer.BatchRows)},
		{"indexer.batch_wait", int64(c.Indexer.BatchWait)},
		{"indexer.reconcile_interval", int64(c.Indexer.ReconcileInterval)},
		{"indexer.max_memory", int64(c.Indexer.MaxMemory)},
		{"indexer.max_statement_time", int64(c.Indexer.MaxStatementTime)},
		{"publisher.interval", int64(c.Publisher.Interval)},
		{"catalog.snapshot_retention", int64(c.Catalog.SnapshotRetention)},
		{"catalog.snapshot_retain_min", int64(c.Catalog.SnapshotRetainMin)},
		{"catalog.gc_grace", int64(c.Catalog.GCGrace)},
		{"catalog.compact_interval", int64(c.Catalog.CompactInterval)},
		{"catalog.compact_min_packs", int64(c.Catalog.CompactMinPacks)},
		{"catalog.compact_small_bytes", c.Catalog.CompactSmallBytes},
		{"catalog.compact_max_bytes", c.Catalog.CompactMaxBytes},
		{"catalog.gc_interval", int64(c.Catalog.GCInterval)},
		{"catalog.claims_grace", int64(c.Catalog.ClaimsGrace)},
		{"publisher.lease_ttl", int64(c.Publisher.LeaseTTL)},
		{"nats.max_age", int64(c.NATS.MaxAge)},
		{"nats.max_bytes", int64(c.NATS.MaxBytes)},
	} {
		if p.v <= 0 {
			return bad(p.key, "must be positive")
		}
	}
	if c.Source.ResyncChunkRows > 1<<20 {
		return bad("source.resync_chunk_rows", "%d: at most %d (a chunk is held in memory)", c.Source.ResyncChunkRows, 1<<20)
	}
	if c.Catalog.ClaimsGrace < 5*time.Minute {
		return bad("catalog.claims_grace", "%s: at least 5m (a claim is never deleted within minutes of being written)", c.Catalog.ClaimsGrace)
	}
	if c.Catalog.CompactMinPacks < 2 {
		return bad("catalog.compact_min_packs", "%d: at least 2 (compaction folds many members into one)", c.Catalog.CompactMinPacks)
	}
	if c.Delivery.Partitions > 4096 {
		return bad("delivery.partitions", "%d: at most 4096", c.Delivery.Partitions)
	}
	if c.Reader.MaxInlineValue < 0 {
		return bad("reader.max_inline_value", "must not be negative")
	}
	if c.Reader.BatchBytes >= c.NATS.MaxPayload {
		return bad("reader.batch_bytes", "%d must be below nats.max_payload (%d)", c.Reader.BatchBytes, c.NATS.MaxPayload)
	}
	if c.Publisher.LeaseTTL <= 2*c.Publisher.Interval {
		return bad("publisher.lease_ttl", "%s must exceed twice publisher.interval (%s)", c.Publisher.LeaseTTL, c.Publisher.Interval)
	}
	switch c.Telemetry.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return bad("telemetry.log_level", "%q: want debug, info, warn or error", c.Telemetry.LogLevel)
	}
	switch c.Telemetry.LogFormat {
	case "auto", "json", "text":
	default:
		return bad("telemetry.log_format", "%q: want auto, json or text", c.Telemetry.LogFormat)
	}
	if c.Telemetry.JaegerUI != "" {
		if err := checkURL("telemetry.jaeger_ui", c.Telemetry.JaegerUI, "http", "https"); err != nil {
			return err
		}
	}
	if c.Demo.Tenants <= 0 {
		return bad("demo.tenants", "must be positive")
	}
	if c.Demo.Rate < 0 {
		return bad("demo.rate", "must not be negative")
	}
	return nil
}

func checkDSN(key, dsn string) error {
	if dsn == "" {
		return nil
	}
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return bad(key, "want a URL of the form postgres://user@host:port/db")
	}
	return nil
}

func checkURL(key, raw string, schemes ...string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return bad(key, "not a URL")
	}
	for _, s := range schemes {
		if u.Scheme == s {
			return nil
		}
	}
	return bad(key, "scheme %q: want one of %v", u.Scheme, schemes)
}

// PacksDir is the local pack directory when packs.url is empty or file://.
func (c *Config) PacksDir() string {
	if c.Packs.URL == "" {
		return filepath.Join(c.DataDir, "packs")
	}
	u, _ := url.Parse(c.Packs.URL)
	return u.Path
}

// StateDSN is the DSN of the cursor and lease store.
func (c *Config) StateDSN() string {
	if c.State.DSN != "" {
		return c.State.DSN
	}
	return c.Source.DSN
}
