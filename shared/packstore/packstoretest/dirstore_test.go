package packstoretest_test

import (
	"testing"

	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

func TestDirStoreContract(t *testing.T) {
	packstoretest.StoreContract(t, func(t *testing.T) packstore.Store {
		s, err := packstore.OpenDir(t.TempDir(), "test-store")
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestDirStoreClaimContract(t *testing.T) {
	packstoretest.ClaimContract(t, func(t *testing.T) packstore.ClaimCollector {
		s, err := packstore.OpenDir(t.TempDir(), "test-store")
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
