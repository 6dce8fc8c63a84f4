package packstoretest_test

import (
	"context"
	"testing"

	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// batchPut routes Put through DirStore.PutMany, so the group-commit path
// passes the same contract as Put.
type batchPut struct{ *packstore.DirStore }

func (b batchPut) Put(ctx context.Context, path string, data []byte) error {
	return b.PutMany(ctx, []packstore.PutItem{{Path: path, Data: data}})[0]
}

func TestDirStorePutManyContract(t *testing.T) {
	packstoretest.StoreContract(t, func(t *testing.T) packstore.Store {
		s, err := packstore.OpenDir(t.TempDir(), "test-store")
		if err != nil {
			t.Fatal(err)
		}
		return batchPut{s}
	})
}
