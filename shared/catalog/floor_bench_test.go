package catalog_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/chtest"
)

// BenchmarkPublishFloor measures, in one process on the embedded engine, the
// floor of every piece a publish is made of: a trivial query, a one-row
// INSERT into each candidate engine (with and without the part-cost
// settings), an INSERT ... SELECT carrying a scalar-subquery fence, and a
// read-back. It reports each piece's p50 in milliseconds as a metric (and,
// with -v, p50/p99 per piece). Pieces run interleaved, round-robin, so load
// from other processes on the machine spreads evenly across them.
//
//	go test -run '^$' -bench PublishFloor -benchtime 200x ./shared/catalog/
func BenchmarkPublishFloor(b *testing.B) {
	conn := chtest.Conn(b)
	ctx := b.Context()
	ddl := []string{
		"CREATE TABLE f_memory (v UInt64, s String) ENGINE = Memory",
		"CREATE TABLE f_mt (v UInt64, s String) ENGINE = MergeTree ORDER BY v",
		"CREATE TABLE f_mt_nofsync (v UInt64, s String) ENGINE = MergeTree ORDER BY v SETTINGS fsync_after_insert = 0, fsync_part_directory = 0, min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000",
		"CREATE TABLE f_mt_fsync (v UInt64, s String) ENGINE = MergeTree ORDER BY v SETTINGS fsync_after_insert = 1, fsync_part_directory = 1",
		"CREATE TABLE f_mt_wide (v UInt64, s String) ENGINE = MergeTree ORDER BY v SETTINGS min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0",
		"CREATE TABLE f_mt_nostats (v UInt64, s String) ENGINE = MergeTree ORDER BY v SETTINGS auto_statistics_types = ''",
		"CREATE TABLE f_mt_lean (v UInt64, s String) ENGINE = MergeTree ORDER BY v SETTINGS auto_statistics_types = '', compress_marks = 0, compress_primary_key = 0, ratio_of_defaults_for_sparse_serialization = 1, write_marks_for_substreams_in_compact_parts = 0",
		"CREATE TABLE f_rmt (v UInt64, s String) ENGINE = ReplacingMergeTree ORDER BY v",
		"CREATE TABLE f_stripelog (v UInt64, s String) ENGINE = StripeLog",
		"CREATE TABLE f_log (v UInt64, s String) ENGINE = Log",
		"CREATE TABLE f_tinylog (v UInt64, s String) ENGINE = TinyLog",
		"CREATE TABLE f_lease (term UInt64, lease_id String, expires_at Int64) ENGINE = Memory SETTINGS max_rows_to_keep = 64",
		"INSERT INTO f_lease VALUES (1, 'L', 9000000000000000)",
		// a watermark-shaped MergeTree with 1,000 rows in a few parts
		"CREATE TABLE f_wm (version UInt64, publish_id String, through_lsn UInt64) ENGINE = MergeTree ORDER BY (version, publish_id)",
		"INSERT INTO f_wm SELECT number, toString(number), number FROM numbers(1000)",
	}
	for _, q := range ddl {
		if err := conn.Exec(ctx, q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	fence := "(SELECT toUInt8(h.1 = 'L' AND h.2 > toUnixTimestamp64Micro(now64(6))) FROM (SELECT argMax((lease_id, expires_at), term) AS h FROM f_lease)) = 1"
	type piece struct {
		name  string
		query bool
		sql   func(i int) string
	}
	ins := func(table, settings string) func(int) string {
		return func(i int) string {
			return fmt.Sprintf("INSERT INTO %s (v, s)%s VALUES (%d, 'x')", table, settings, i)
		}
	}
	pieces := []piece{
		{"select1", true, func(int) string { return "SELECT 1" }},
		{"select1-tiny", true, func(int) string { return "SELECT 1 SETTINGS max_threads = 1" }},
		{"exec-select1", false, func(int) string { return "SELECT 1" }},
		{"ins-memory", false, ins("f_memory", "")},
		{"ins-mergetree", false, ins("f_mt", "")},
		{"ins-mergetree-tiny", false, ins("f_mt", " SETTINGS max_threads = 1")},
		{"ins-mergetree-nodedup", false, ins("f_mt", " SETTINGS insert_deduplicate = 0, max_insert_threads = 1, parallel_view_processing = 0, log_queries = 0")},
		{"ins-mergetree-nofsync-compact", false, ins("f_mt_nofsync", "")},
		{"ins-mergetree-fsync", false, ins("f_mt_fsync", "")},
		{"ins-mergetree-wide", false, ins("f_mt_wide", "")},
		{"ins-mergetree-noasync", false, ins("f_mt", " SETTINGS async_insert = 0")},
		{"ins-mergetree-nolog", false, ins("f_mt", " SETTINGS async_insert = 0, log_queries = 0, log_processors_profiles = 0, log_profile_events = 0")},
		{"ins-mergetree-nostats", false, ins("f_mt_nostats", " SETTINGS async_insert = 0")},
		{"ins-mergetree-lean", false, ins("f_mt_lean", " SETTINGS async_insert = 0")},
		{"inssel-mergetree-nostats", false, func(i int) string {
			return fmt.Sprintf("INSERT INTO f_mt_nostats (v, s) SELECT %d, 'x'", i)
		}},
		{"ins-memory-noasync", false, ins("f_memory", " SETTINGS async_insert = 0")},
		{"ins-replacingmt", false, ins("f_rmt", "")},
		{"ins-stripelog", false, ins("f_stripelog", "")},
		{"ins-log", false, ins("f_log", "")},
		{"ins-tinylog", false, ins("f_tinylog", "")},
		{"inssel-mergetree-fenced", false, func(i int) string {
			return fmt.Sprintf("INSERT INTO f_mt (v, s) SELECT %d, 'x' WHERE %s SETTINGS max_threads = 1", i, fence)
		}},
		{"inssel-stripelog-fenced", false, func(i int) string {
			return fmt.Sprintf("INSERT INTO f_stripelog (v, s) SELECT %d, 'x' WHERE %s SETTINGS max_threads = 1", i, fence)
		}},
		{"inssel-memory-fenced", false, func(i int) string {
			return fmt.Sprintf("INSERT INTO f_memory (v, s) SELECT %d, 'x' WHERE %s SETTINGS max_threads = 1", i, fence)
		}},
		{"select-scalar1", true, func(int) string { return "SELECT (SELECT 1)" }},
		{"select-scalar2", true, func(int) string { return "SELECT (SELECT 1), (SELECT 2)" }},
		{"select-scalar1-noanalyzer", true, func(int) string { return "SELECT (SELECT 1) SETTINGS enable_analyzer = 0" }},
		{"select-memory-agg", true, func(int) string { return "SELECT argMax((lease_id, expires_at), term) FROM f_lease" }},
		{"select-memory-agg-tiny", true, func(int) string {
			return "SELECT argMax((lease_id, expires_at), term) FROM f_lease SETTINGS max_threads = 1"
		}},
		{"select-memory-agg-noanalyzer", true, func(int) string {
			return "SELECT argMax((lease_id, expires_at), term) FROM f_lease SETTINGS max_threads = 1, enable_analyzer = 0"
		}},
		{"select-wm-agg", true, func(int) string { return "SELECT max(through_lsn) FROM f_wm SETTINGS max_threads = 1" }},
		{"select-fence-from", true, func(int) string {
			return "SELECT toUInt8(h.1 = 'L' AND h.2 > toUnixTimestamp64Micro(now64(6))) FROM (SELECT argMax((lease_id, expires_at), term) AS h FROM f_lease) SETTINGS max_threads = 1"
		}},
		{"select-fence-noanalyzer", true, func(int) string {
			return "SELECT " + fence + " SETTINGS max_threads = 1, enable_analyzer = 0"
		}},
		{"multi-ins-mt+select1", true, func(i int) string {
			return fmt.Sprintf("INSERT INTO f_mt_nostats (v, s) VALUES (%d, 'x'); SELECT 1", i)
		}},
		{"multi-3x-select1", true, func(int) string { return "SELECT 1; SELECT 1; SELECT 1" }},
		{"select-fence-nolog", true, func(int) string {
			return "SELECT " + fence + " SETTINGS max_threads = 1, log_queries = 0, log_processors_profiles = 0, log_profile_events = 0"
		}},
		{"select-fence", true, func(int) string { return "SELECT " + fence + " SETTINGS max_threads = 1" }},
		{"readback-wm-1k", true, func(int) string {
			return "SELECT countIf(version >= 500), max(through_lsn), groupArrayIf(publish_id, version = 500) FROM f_wm SETTINGS max_threads = 1"
		}},
		{"readback-wm-1k-union-lease", true, func(int) string {
			return `SELECT 'w', toString(countIf(version >= 500)), max(through_lsn) FROM f_wm
				UNION ALL SELECT 'l', lease_id, term FROM (SELECT term, lease_id FROM f_lease ORDER BY term DESC LIMIT 2)
				UNION ALL SELECT 'c', '', toUInt64(toUnixTimestamp64Micro(now64(6))) SETTINGS max_threads = 1`
		}},
	}
	d := make(map[string][]time.Duration, len(pieces))
	n := 0
	for b.Loop() {
		for _, p := range pieces {
			q := p.sql(n)
			t0 := time.Now()
			var err error
			if p.query {
				_, err = conn.Query(ctx, q)
			} else {
				err = conn.Exec(ctx, q)
			}
			d[p.name] = append(d[p.name], time.Since(t0))
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
		}
		n++
	}
	var sb strings.Builder
	for _, p := range pieces {
		s := d[p.name]
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		p50 := float64(s[len(s)/2].Microseconds()) / 1000
		p99 := float64(s[len(s)*99/100].Microseconds()) / 1000
		b.ReportMetric(p50, p.name+"-ms")
		fmt.Fprintf(&sb, "  %-32s n=%-5d p50 %7.3f ms  p99 %7.3f ms\n", p.name, len(s), p50, p99)
	}
	b.Logf("floors (interleaved, one process):\n%s", sb.String())
}
