//go:build chdb

// Run with: go test -tags chdb -run S3ClickHouse ./packstore/ (needs libchdb,
// see chdb_test.go, and the S3 server of deploy/fetch-s3server.sh).

package packstore_test

import (
	"testing"

	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// TestS3ClickHouseReadsPack checks that the real ClickHouse engine (chDB)
// reads a pack from a real S3 server through S3Store.TableFunction.
func TestS3ClickHouseReadsPack(t *testing.T) {
	if testing.Short() {
		t.Skip("loads libchdb")
	}
	needChDB(t)
	engineReadsPack(t, pt.StartS3Server(t).Open(t, "packs"))
}
