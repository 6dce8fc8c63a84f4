package catalog_test

import (
	"os"
	"testing"

	"github.com/sluice-cdc/sluice/shared/chtest"
)

func TestDbgDrop(t *testing.T) {
	conn := chtest.Conn(t)
	for _, q := range []string{
		"CREATE TABLE a (x UInt64) ENGINE = MergeTree ORDER BY x",
		"CREATE TABLE b (x UInt64) ENGINE = MergeTree ORDER BY x",
		"INSERT INTO a VALUES (1)",
		"CREATE OR REPLACE VIEW v AS SELECT x FROM a WHERE x IN (SELECT x FROM b)",
	} {
		if os.Getenv("DBG_N") != "" && q[0] == 'C' && q[7] == 'O' {
			break
		}
		if err := conn.Exec(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
}
