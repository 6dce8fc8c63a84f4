//go:build chdb

// Run with: go test -tags chdb -run S3ClickHouse ./packstore/ (needs libchdb,
// see chdb_test.go, and the S3 server of deploy/fetch-s3server.sh).

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

// TestS3ClickHouseReadsPack checks that the real ClickHouse engine (chDB)
// reads a pack from a real S3 server through S3Store.TableFunction.
func TestS3ClickHouseReadsPack(t *testing.T) {
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
	srv := pt.StartS3Server(t)
	s := srv.Open(t, "packs")
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
