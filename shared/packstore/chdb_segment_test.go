//go:build chdb

package packstore_test

import (
	"context"
	"testing"

	"github.com/sluice-cdc/sluice/shared/packstore"
)

// TestClickHouseReadsSegment: ClickHouse (chDB) reads a segment's
// _sluice_destination (utf8) straight into a String column, each row with
// its destination.
func TestClickHouseReadsSegment(t *testing.T) {
	needChDB(t)
	s, err := packstore.OpenDir(t.TempDir(), "local")
	if err != nil {
		t.Fatal(err)
	}
	parts, release := sampleParts(nil)
	defer release()
	sm := sampleSegmentMeta()
	data, _, err := packstore.EncodeSegment(parts, sm)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), sm.Path(), data); err != nil {
		t.Fatal(err)
	}
	q := "SELECT toTypeName(_sluice_destination), _sluice_destination, id FROM " + s.TableFunction(sm.Path()) + " ORDER BY id"
	got := queryTSV(t, q)
	want := "String\tshopA\t1\nString\tshopA\t2\nString\tshopB\t3\nString\tshopB\t4\nString\tshopB\t5\nString\tshopC\t7"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
