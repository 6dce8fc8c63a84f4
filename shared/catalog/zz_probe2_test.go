package catalog_test

import (
	"sort"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/chtest"
)

func TestProbeInsert(t *testing.T) {
	conn := chtest.Conn(t)
	ctx := t.Context()
	must := func(q string) {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	res, _ := conn.Query(ctx, "SELECT name, value FROM system.merge_tree_settings WHERE name IN ('fsync_after_insert','fsync_part_directory','min_bytes_for_wide_part','min_rows_for_wide_part','ratio_of_defaults_for_sparse_serialization','min_bytes_for_full_part_storage','write_final_mark','compress_marks','compress_primary_key','replace_long_file_name_to_hash','assign_part_uuids')")
	t.Log(res.Rows)
	res, _ = conn.Query(ctx, "SELECT name, value FROM system.settings WHERE name IN ('async_insert','insert_deduplicate','optimize_on_insert','max_insert_threads','input_format_parallel_parsing','max_threads','log_queries','insert_quorum','parallel_distributed_insert_select','min_insert_block_size_rows')")
	t.Log(res.Rows)
	must("CREATE TABLE a (x UInt64, s String) ENGINE = MergeTree ORDER BY x")
	must("CREATE TABLE b (x UInt64, s String) ENGINE = MergeTree ORDER BY x SETTINGS ratio_of_defaults_for_sparse_serialization = 1, compress_marks = 0, compress_primary_key = 0")
	must("CREATE TABLE c (x UInt64, s String) ENGINE = StripeLog")
	must("CREATE TABLE d (x UInt64, s String) ENGINE = MergeTree ORDER BY x SETTINGS min_bytes_for_full_part_storage = 1000000000")
	must("CREATE TABLE e (x UInt64, s String) ENGINE = Memory")
	qs := []string{
		"INSERT INTO a SELECT 1, 'x'",
		"INSERT INTO d SELECT 1, 'x'",
		"INSERT INTO b SELECT 1, 'x'",
		"INSERT INTO e SELECT 1, 'x'",
		"INSERT INTO a VALUES (1, 'x')",
		"INSERT INTO a SETTINGS async_insert=0 VALUES (1, 'x')",
		"SELECT 1",
	}
	ds := make([][]time.Duration, len(qs))
	for range 40 {
		for i, q := range qs {
			t0 := time.Now()
			if err := conn.Exec(ctx, q); err != nil {
				t.Fatal(q, err)
			}
			ds[i] = append(ds[i], time.Since(t0))
		}
	}
	for i, q := range qs {
		d := ds[i]
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		t.Logf("%6.2fms min %6.2fms  %s", float64(d[len(d)/2].Microseconds())/1000, float64(d[0].Microseconds())/1000, q)
	}
	r, err := conn.Query(ctx, "SELECT * FROM system.parts WHERE database = currentDatabase() AND table = 'd' LIMIT 1 FORMAT Vertical")
	t.Log(r, err)
}
