//go:build chdb

package packstore_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/chdb-io/chdb-go/chdb"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// TestClickHouseReadsSmallAndLargePacks: packs below CompressMinBytes are
// uncompressed, larger ones zstd; ClickHouse (chDB) reads both.
func TestClickHouseReadsSmallAndLargePacks(t *testing.T) {
	needChDB(t)
	s, err := packstore.OpenDir(t.TempDir(), "local")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{3, 20000} {
		rows := make([]pt.Row, n)
		for i := range rows {
			rows[i] = pt.Row{ID: int64(i), Tenant: "shop1", Note: pt.Str(strings.Repeat("x", i%50)), Op: proto.OpInsert, LSN: 7, Seq: uint64(i + 1)}
		}
		rec := pt.Batch(nil, rows)
		m := sampleMeta()
		m.PackID = m.PackID + "-" + strings.Repeat("n", n%7+1)
		data, err := packstore.EncodePack([]arrow.RecordBatch{rec}, m)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		// The zstd frame magic appears only in compressed packs.
		zstd := bytes.Contains(data, []byte{0x28, 0xb5, 0x2f, 0xfd})
		if zstd != (n > 100) {
			t.Fatalf("%d rows: zstd=%v", n, zstd)
		}
		if err := s.Put(context.Background(), m.Path(), data); err != nil {
			t.Fatal(err)
		}
		res, err := chdb.Query("SELECT count(), sum(id), max(length(note)) FROM "+s.TableFunction(m.Path()), "TSV")
		if err != nil || res.Error() != nil {
			t.Fatalf("%d rows: %v %v", n, err, res.Error())
		}
		want := map[int]string{3: "3\t3\t2", 20000: "20000\t199990000\t49"}[n]
		if got := strings.TrimSpace(res.String()); got != want {
			t.Fatalf("%d rows: got %q want %q", n, got, want)
		}
	}
}
