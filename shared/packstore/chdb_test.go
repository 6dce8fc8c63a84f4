//go:build chdb

// Run with: CHDB_LIB_PATH=/root/.cache/sluice/chdb/package/libchdb.so go test -tags chdb ./packstore/
// (chdb-go loads libchdb in a package init and panics without it, so this
// test is behind a build tag rather than a skip).

package packstore_test

import (
	"testing"

	"github.com/sluice-cdc/sluice/shared/packstore"
)

// TestClickHouseReadsPack checks that the real ClickHouse engine (chDB)
// reads a pack through DirStore.TableFunction with its types intact.
func TestClickHouseReadsPack(t *testing.T) {
	if testing.Short() {
		t.Skip("loads libchdb")
	}
	needChDB(t)
	s, err := packstore.OpenDir(t.TempDir()+"/it's", "local")
	if err != nil {
		t.Fatal(err)
	}
	engineReadsPack(t, s)
}
