// Package pgtest is the test kit's Postgres: one private cluster per test
// binary (wal_level=logical, fsync off), started lazily on first use, and a
// fresh database per test.
//
//	func TestMain(m *testing.M) { pgtest.Main(m) } // stops the cluster, removes its files
//
//	dsn := pgtest.NewDB(t) // a new database, dropped (with its replication slots) at cleanup
//	pgtest.Exec(t, dsn, "CREATE TABLE t (id int primary key)")
//	c := pgtest.Cluster(t) // the cluster itself: Stop, Kill, Restart, DSN
//
// The cluster lives under os.TempDir()/sluice-pgtest-<pid>. A detached
// watchdog stops it and removes that directory when the test binary exits,
// so a binary killed by a timeout leaves no server behind even without Main;
// Main just does it at once.
//
// pgtest must never be imported by non-test code, and never starts more than
// one shared cluster per process. It starts no goroutines of its own (it uses short
// pgx connections, not a pool), so packages using goleak can use it.
//
// Start-up takes about half a second: the cluster is copied from an initdb'd
// template under os.TempDir() (sluice-pgtest-template-*), built once per
// machine user and Postgres version. fsync and full_page_writes are off;
// synchronous_commit stays on, so Kill never loses an acknowledged commit.
//
// A test that stops or kills the shared cluster must restart it before it
// returns; tests that need a cluster of their own call Own, or Pair for a
// primary and a hot standby (other binaries: NeedBinaries), or
// pgcluster.Start.
package pgtest
