// Package pgcluster runs a private Postgres cluster from the locally
// installed server binaries (initdb, pg_ctl): the demo's source database in
// `sluice dev` and the test kit's database server (see shared/pgtest).
//
// It owns one data directory per Cluster: initdb on first start, a generated
// sluice.conf included from postgresql.conf (port, listen on 127.0.0.1 only,
// the socket in the data directory, wal_level=logical, replication slot and
// sender limits, TimeZone=UTC, plus the caller's settings), and the server's
// life cycle (start, fast stop, immediate stop as a crash, restart).
//
// Postgres refuses to run as root. When the process is root, every server
// binary runs as the `postgres` user through `runuser -u postgres --` and the
// data directory is chowned to that user; its parent directories must be
// traversable by it.
//
// The postmaster is started in its own process group, so a Ctrl-C on the
// terminal reaches sluice (which drains and still needs Postgres for its
// cursors) and not the database.
//
// pgcluster must never touch a directory other than Options.Dir, never listen
// on anything but 127.0.0.1, and never be used against a user's own Postgres:
// it is for clusters sluice created itself.
//
// NOTES
//   - Start on a directory whose server is already running (postmaster.pid
//     names a live postmaster, e.g. after `sluice dev` was killed with -9)
//     adopts that server and its port instead of failing — unless
//     Options.Owned: then the owner recorded in Dir/sluice.owner (pid and
//     /proc start time, so a reused pid does not count) decides: exited
//     (or a zombie) → the server is stopped and a fresh one started
//     (StoppedStale names the owner); still running and not this process →
//     ErrOwned, and the server is left alone; no record → adopted.
//   - Port 0 reuses the port of the previous start when it is free, so a
//     restarted demo keeps its DSN; otherwise a free port is picked.
//   - Options.Template copies a directory made by InitTemplate instead of
//     running initdb (0.3s instead of 0.9s here); the test kit uses it.
//   - The binaries are BinDir()'s ($SLUICE_PG_BINDIR, else the installed
//     ones), or Options.BinDir's for one cluster (a test of another
//     version); Version names their version.
//   - Watchdog starts a detached process that stops the cluster when a given
//     process exits: the test kit uses it so no server outlives its test
//     binary, even when the binary is killed.
package pgcluster
