// Package packstoretest holds the contract suite every packstore.Store
// implementation must pass (StoreContract) and small builders of
// pack-shaped Arrow batches for tests. It is test support only: production
// code must never import it.
package packstoretest
