//go:build chdb

// Run with: CHDB_LIB_PATH=/root/.cache/sluice/chdb/package/libchdb.so go test -tags chdb ./packstore/
// (chdb-go loads libchdb in a package init and panics without it, so this
// test is behind a build tag rather than a skip).

package packstore_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/chdb-io/chdb-go/chdb"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// TestClickHouseReadsPack checks that the real ClickHouse engine (chDB)
// reads a pack through DirStore.TableFunction with its types intact.
func TestClickHouseReadsPack(t *testing.T) {
	if testing.Short() {
		t.Skip("loads libchdb")
	}
	lib := os.Getenv("CHDB_LIB_PATH")
	if lib == "" {
		lib = "/root/.cache/sluice/chdb/package/libchdb.so"
		t.Setenv("CHDB_LIB_PATH", lib)
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("libchdb not available: %v", err)
	}
	s, err := packstore.OpenDir(t.TempDir()+"/it's", "local")
	if err != nil {
		t.Fatal(err)
	}
	rec := pt.Batch(nil, []pt.Row{
		{ID: 1, Tenant: "shop1", Note: pt.Str("o'hara"), Op: proto.OpInsert, LSN: 7, Seq: 1},
		{ID: 2, Tenant: "shop1", Op: proto.OpUpdate, LSN: 7, Seq: 2, Unchanged: []string{"note"}},
	})
	defer rec.Release()
	m := sampleMeta()
	data, err := packstore.EncodePack([]arrow.RecordBatch{rec}, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), m.Path(), data); err != nil {
		t.Fatal(err)
	}
	q := "SELECT id, note, _sluice_op, _sluice_seq, _sluice_unchanged FROM " + s.TableFunction(m.Path()) + " ORDER BY id"
	res, err := chdb.Query(q, "TSV")
	if err != nil {
		t.Fatal(err)
	}
	if res.Error() != nil {
		t.Fatal(res.Error())
	}
	got := strings.TrimSpace(res.String())
	want := "1\to\\'hara\t1\t1\t[]\n2\t\\N\t2\t2\t['note']"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
