package config

import (
	"net/url"
	"time"

	"github.com/sluice-cdc/sluice/proto"
)

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
	if err := checkDSN("source.primary_dsn", c.Source.PrimaryDSN); err != nil {
		return err
	}
	if c.Source.PrimaryDSN != "" && c.Source.DSN == "" {
		return bad("source.primary_dsn", "set without source.dsn: it names the primary of the standby source.dsn reaches (sluice dev's private cluster has none)")
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
		{"http.max_reads", int64(c.HTTP.MaxReads)},
		{"http.read_queue_wait", int64(c.HTTP.ReadQueueWait)},
	} {
		if p.v <= 0 {
			return bad(p.key, "must be positive")
		}
	}
	if c.Source.ResyncChunkRows > 1<<20 {
		return bad("source.resync_chunk_rows", "%d: at most %d (a chunk is held in memory)", c.Source.ResyncChunkRows, 1<<20)
	}
	if p := c.Source.Protocol; p != 0 && p != 1 && p != 2 {
		return bad("source.protocol", "%d: want 1 or 2 (or leave it out: 2 from Postgres 14 on, else 1)", p)
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
	switch c.Telemetry.DestinationNames {
	case "plain", "hash", "omit":
	default:
		return bad("telemetry.destination_names", "%q: want plain, hash or omit", c.Telemetry.DestinationNames)
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
	if c.Telemetry.JaegerQuery != "" {
		if err := checkURL("telemetry.jaeger_query", c.Telemetry.JaegerQuery, "http", "https"); err != nil {
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
