package config

import (
	"net/url"
	"path/filepath"
	"time"
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
	DSN string `yaml:"dsn" secret:"password"`
	// PrimaryDSN names the primary when DSN reaches a hot standby
	// (Postgres 16+): the reader decodes from the standby (its slot, its
	// replication connection, every read of rows and catalog) and writes
	// to the primary (the publication, resync watermarks, and sluice's
	// state when state.dsn is empty). Required when DSN is a standby;
	// when DSN is a primary it must reach that same server. Credentials as
	// for DSN: only from the environment (SLUICE_SOURCE_PRIMARY_DSN or
	// PGPASSWORD). docs/adr/0045-standby-decoding.md.
	PrimaryDSN string   `yaml:"primary_dsn" secret:"password"`
	Tables     []string `yaml:"tables"`
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
	// Protocol is the pgoutput protocol version the reader asks for: 2
	// (the default from Postgres 14 on) streams a transaction that passes
	// the server's logical_decoding_work_mem before its commit, into
	// reader.spill_dir, so it is published within moments of its commit;
	// 1 (the default before 14) sends it only once committed. 0 is the
	// default.
	Protocol int `yaml:"protocol"`
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
	// InsecureNoTLS lets sluice send a NATS password or token to a server
	// off loopback over a connection without TLS (nats:// without
	// nats.tls_ca or tls_cert); without it that is refused.
	InsecureNoTLS bool `yaml:"insecure_no_tls"`
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
	// PasswordFile names a file holding the password (surrounding white
	// space ignored) when SLUICE_CATALOG_PASSWORD is not set: the file
	// `sluice catalog serve` generates (<data_dir>/catalog_password), for
	// the processes it serves.
	PasswordFile string `yaml:"password_file"`
	TLSCA        string `yaml:"tls_ca"`
	Prefix       string `yaml:"prefix"` // table name prefix, default "sluice"
	// InsecureNoTLS lets sluice send its credentials (catalog.password,
	// and the pack store's S3 keys inside the s3() table functions of its
	// indexing statements) to a ClickHouse server over a connection without
	// TLS on a non-loopback host; without it such a configuration is
	// refused.
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
	// SpillDir holds, on local disk, the in-progress transactions Postgres
	// streams (source.protocol 2) until their commit or abort: a cache the
	// reader empties at each session start (default <data_dir>/reader-spill).
	SpillDir string `yaml:"spill_dir"`
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
	// MaxReads caps the reads of destination rows the API serves at once
	// (a rows page each, an export for its whole length); one past the cap
	// waits up to ReadQueueWait for a slot, then is answered 503 with
	// Retry-After. Default 4.
	MaxReads int `yaml:"max_reads"`
	// ReadQueueWait is how long a read waits for a slot. Default 10s.
	ReadQueueWait time.Duration `yaml:"read_queue_wait"`
}

// Telemetry is logs, traces and metrics.
type Telemetry struct {
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// OTLPTLS sends traces over TLS (the system's CAs, or OTLPTLSCA);
	// without it they go in plaintext, logged at start for an endpoint off
	// loopback (spans carry destination names unless DestinationNames
	// says otherwise).
	OTLPTLS bool `yaml:"otlp_tls"`
	// OTLPTLSCA is a PEM bundle of the CAs that sign the collector's
	// certificate; setting it implies OTLPTLS.
	OTLPTLSCA string `yaml:"otlp_tls_ca"`
	// DestinationNames is what exported spans say of a destination (a
	// tenant): plain (its name, the default), hash (a stable pseudonym,
	// telemetry.HashDestination; `sluice trace` hashes the same way) or
	// omit (nothing). It covers sluice.destination and the destination
	// inside subjects and message ids.
	DestinationNames string `yaml:"destination_names"`
	LogLevel         string `yaml:"log_level"`
	LogFormat        string `yaml:"log_format"` // auto (text on a terminal, JSON otherwise) | json | text
	// JaegerUI is the base URL of Jaeger's UI (e.g.
	// http://127.0.0.1:16686) as a browser reaches it: the start-up
	// summary prints it and the web UI links a destination's pack traces
	// there. It is also the query API unless JaegerQuery is set.
	JaegerUI string `yaml:"jaeger_ui"`
	// JaegerQuery is the base URL of Jaeger's query API (/api/traces) as
	// this process reaches it: `sluice trace` and the web UI's own trace
	// view (/ui?trace=ID, served through /api/v1/traces/ID) read spans
	// there. Empty: JaegerUI. `make run` sets it to the Jaeger it starts,
	// which has no web assets of its own, so the web UI links traces to
	// its own view.
	JaegerQuery string `yaml:"jaeger_query"`
}

// QueryURL is where Jaeger's query API is: JaegerQuery, else JaegerUI;
// "" when neither is set.
func (t Telemetry) QueryURL() string {
	if t.JaegerQuery != "" {
		return t.JaegerQuery
	}
	return t.JaegerUI
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
		HTTP:      HTTP{Listen: "127.0.0.1:8080", MaxReads: 4, ReadQueueWait: 10 * time.Second},
		Telemetry: Telemetry{LogLevel: "info", LogFormat: "auto", DestinationNames: "plain"},
		Demo:      Demo{Tenants: 300, Rate: 20},
	}
}

// EffectiveClaimsGrace is catalog.claims_grace, raised to nats.max_age:
// a backfill or resync batch can wait in a stream that long, its claims
// older than its stream position (docs/adr/0033-claim-gc.md).
func (c Catalog) EffectiveClaimsGrace(n NATS) time.Duration { return max(c.ClaimsGrace, n.MaxAge) }

// ReaderSpillDir is the directory of the reader's spill files for slot:
// reader.spill_dir, or <data_dir>/reader-spill, then the slot's name.
func (c *Config) ReaderSpillDir() string {
	d := c.Reader.SpillDir
	if d == "" {
		d = filepath.Join(c.DataDir, "reader-spill")
	}
	return filepath.Join(d, c.Source.Slot)
}

// PacksDir is the local pack directory when packs.url is empty or file://.
func (c *Config) PacksDir() string {
	if c.Packs.URL == "" {
		return filepath.Join(c.DataDir, "packs")
	}
	u, _ := url.Parse(c.Packs.URL)
	return u.Path
}

// StateDSN is the DSN of the cursor and lease store: state.dsn, else the
// source database on the server sluice writes to (source.primary_dsn when
// set: a standby refuses writes), else source.dsn.
func (c *Config) StateDSN() string {
	if c.State.DSN != "" {
		return c.State.DSN
	}
	return c.SourceWriteDSN()
}

// SourceWriteDSN is the DSN of the source server sluice writes to: the
// primary, source.primary_dsn when set, else source.dsn.
func (c *Config) SourceWriteDSN() string {
	if c.Source.PrimaryDSN != "" {
		return c.Source.PrimaryDSN
	}
	return c.Source.DSN
}
