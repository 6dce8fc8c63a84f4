//go:build chdb

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

// needChDB skips the test when libchdb is missing; unset, CHDB_LIB_PATH
// names the copy make libchdb fetches.
func needChDB(t *testing.T) {
	t.Helper()
	lib := os.Getenv("CHDB_LIB_PATH")
	if lib == "" {
		lib = "/root/.cache/sluice/chdb/package/libchdb.so"
		t.Setenv("CHDB_LIB_PATH", lib)
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("libchdb not available: %v", err)
	}
}

// queryTSV runs q on the engine and returns its answer, trimmed.
func queryTSV(t *testing.T, q string) string {
	t.Helper()
	res, err := chdb.Query(q, "TSV")
	if err != nil {
		t.Fatal(err)
	}
	if res.Error() != nil {
		t.Fatal(res.Error())
	}
	return strings.TrimSpace(res.String())
}

// engineReadsPack writes a two-row pack (a quoted string, a NULL, an
// unchanged column) to s and checks the engine reads it through
// s.TableFunction with its types intact.
func engineReadsPack(t *testing.T, s packstore.Store) {
	t.Helper()
	rec := pt.Batch(nil, []pt.Row{
		{ID: 1, Tenant: "shop1", Note: pt.Str("o'hara"), Op: proto.OpInsert, LSN: 7, Seq: 1},
		{ID: 2, Tenant: "shop1", Op: proto.OpUpdate, LSN: 7, Seq: 2, Unchanged: []string{"note"}},
	})
	defer rec.Release()
	m := sampleMeta()
	m.StoreID = s.ID()
	data, err := packstore.EncodePack([]arrow.RecordBatch{rec}, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), m.Path(), data); err != nil {
		t.Fatal(err)
	}
	got := queryTSV(t, "SELECT id, note, _sluice_op, _sluice_seq, _sluice_unchanged FROM "+s.TableFunction(m.Path())+" ORDER BY id")
	want := "1\to\\'hara\t1\t1\t[]\n2\t\\N\t2\t2\t['note']"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
