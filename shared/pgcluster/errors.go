package pgcluster

import "errors"

var (
	// ErrNoBinaries means the Postgres server binaries were not found.
	ErrNoBinaries = errors.New("postgres server binaries not found: install them (Debian/Ubuntu: apt-get install postgresql; the folder `pg_config --bindir` names must hold initdb, pg_ctl and postgres) or set SLUICE_PG_BINDIR")
	// ErrNotRunning is returned by operations that need a running server.
	ErrNotRunning = errors.New("postgres cluster is not running")
	// ErrBadDir means Options.Dir cannot hold a cluster.
	ErrBadDir = errors.New("unusable cluster directory")
	// ErrOwned means an owned Start found the server run by another live
	// process.
	ErrOwned = errors.New("postgres cluster is owned by another running process")
)
