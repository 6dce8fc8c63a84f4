package catalog_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

// recorder keeps every statement Exec runs, then runs it.
type recorder struct {
	catalog.Conn
	mu    sync.Mutex
	execs []string
}

func (r *recorder) Exec(ctx context.Context, q string) error {
	r.mu.Lock()
	r.execs = append(r.execs, q)
	r.mu.Unlock()
	return r.Conn.Exec(ctx, q)
}

// TestOnClusterStatements: every statement the catalog runs (the schema,
// a table's registration, an added column, a rebuild's drop), rewritten
// for catalog.cluster: each DDL names the cluster right after its object
// and parses in ClickHouse's own parser (EXPLAIN AST on chDB); every
// *MergeTree engine is Replicated; INSERTs and the Memory lease table are
// unchanged. The rewrite is not run against a ClickHouse cluster (none
// here): see README, "Replicated ClickHouse".
func TestOnClusterStatements(t *testing.T) {
	conn := chtest.Conn(t)
	rec := &recorder{Conn: conn}
	c := catalog.New(rec, catalog.Options{Prefix: "sluice"})
	ctx := t.Context()
	if err := c.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	ti := mustInfo(t)
	if _, err := c.Register(ctx, ti); err != nil {
		t.Fatal(err)
	}
	ti2 := ti
	ti2.Fingerprint = "fp2"
	ti2.Columns = append(append([]catalog.Column(nil), ti.Columns...), catalog.Column{Name: "added_col", Kind: ti.Columns[len(ti.Columns)-1].Kind})
	if _, err := c.Register(ctx, ti2); err != nil {
		t.Fatal(err)
	}
	if err := c.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, q := range rec.execs {
		got := catalog.OnClusterSQL(q, "prod")
		head := strings.ToUpper(strings.TrimSpace(q))
		ddl := strings.HasPrefix(head, "CREATE") || strings.HasPrefix(head, "ALTER") || strings.HasPrefix(head, "DROP")
		if !ddl {
			if got != q {
				t.Errorf("a non-DDL statement was rewritten:\n%s\n->\n%s", q, got)
			}
			kinds["unchanged"]++
			continue
		}
		verb := strings.Join(strings.Fields(head)[:2], " ")
		kinds[verb]++
		if strings.Count(got, " ON CLUSTER `prod`") != 1 {
			t.Errorf("no ON CLUSTER in:\n%s", got)
		}
		if strings.Contains(got, "ENGINE = MergeTree") || strings.Contains(got, "ENGINE = ReplacingMergeTree") {
			t.Errorf("an unreplicated MergeTree engine is left in:\n%s", got)
		}
		if strings.Contains(q, "ENGINE = Memory") != strings.Contains(got, "ENGINE = Memory") {
			t.Errorf("the Memory engine changed:\n%s", got)
		}
		if err := conn.Exec(ctx, "EXPLAIN AST "+got); err != nil {
			t.Errorf("ClickHouse's parser refuses the rewritten statement: %v\n%s", err, got)
		}
	}
	// The parser check's negative control: ON CLUSTER after the columns.
	if err := conn.Exec(ctx, "EXPLAIN AST CREATE TABLE `x` (a Int64) ON CLUSTER `prod` ENGINE = ReplicatedMergeTree ORDER BY a"); err == nil {
		t.Error("EXPLAIN AST accepts ON CLUSTER in the wrong place: the parser check checks nothing")
	}
	t.Logf("statements: %v", kinds)
	for _, k := range []string{"CREATE TABLE", "CREATE OR", "ALTER TABLE", "DROP TABLE", "DROP VIEW", "unchanged"} {
		if kinds[k] == 0 {
			t.Errorf("the catalog ran no %s statement: the test no longer covers it (%v)", k, kinds)
		}
	}
}

// TestOnClusterRewrite: the exact statements for each DDL form, and the
// negative controls: a MergeTree inside a quoted name or a string literal,
// a SELECT, an INSERT and an empty cluster are left alone.
func TestOnClusterRewrite(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"CREATE TABLE IF NOT EXISTS `sluice_stamp` (version UInt32, stamped_at Int64) ENGINE = MergeTree ORDER BY version",
			"CREATE TABLE IF NOT EXISTS `sluice_stamp` ON CLUSTER `prod` (version UInt32, stamped_at Int64) ENGINE = ReplicatedMergeTree ORDER BY version"},
		{"CREATE TABLE IF NOT EXISTS `sluice_rows_a` (`x ENGINE = MergeTree` String DEFAULT 'ENGINE = MergeTree') ENGINE = ReplacingMergeTree ORDER BY (x)",
			"CREATE TABLE IF NOT EXISTS `sluice_rows_a` ON CLUSTER `prod` (`x ENGINE = MergeTree` String DEFAULT 'ENGINE = MergeTree') ENGINE = ReplicatedReplacingMergeTree ORDER BY (x)"},
		{"CREATE TABLE IF NOT EXISTS `sluice_lease` (term UInt64) ENGINE = Memory SETTINGS max_rows_to_keep = 100",
			"CREATE TABLE IF NOT EXISTS `sluice_lease` ON CLUSTER `prod` (term UInt64) ENGINE = Memory SETTINGS max_rows_to_keep = 100"},
		{"CREATE OR REPLACE VIEW `sluice_manifest` AS SELECT 1", "CREATE OR REPLACE VIEW `sluice_manifest` ON CLUSTER `prod` AS SELECT 1"},
		{"ALTER TABLE `a\\`b` ADD COLUMN IF NOT EXISTS `c` Int64", "ALTER TABLE `a\\`b` ON CLUSTER `prod` ADD COLUMN IF NOT EXISTS `c` Int64"},
		{"DROP TABLE IF EXISTS `sluice_packs`", "DROP TABLE IF EXISTS `sluice_packs` ON CLUSTER `prod`"},
		{"DROP VIEW IF EXISTS `sluice_latest_a`", "DROP VIEW IF EXISTS `sluice_latest_a` ON CLUSTER `prod`"},
		{"INSERT INTO `sluice_stamp` (version) VALUES (1)", "INSERT INTO `sluice_stamp` (version) VALUES (1)"},
		{"SELECT 'CREATE TABLE x ENGINE = MergeTree'", "SELECT 'CREATE TABLE x ENGINE = MergeTree'"},
	} {
		if got := catalog.OnClusterSQL(tc.in, "prod"); got != tc.want {
			t.Errorf("%s\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
	conn := chtest.Conn(t)
	if catalog.OnCluster(conn, "") != conn {
		t.Error("an empty catalog.cluster wraps the connection")
	}
}
