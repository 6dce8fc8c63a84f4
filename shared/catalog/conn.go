package catalog

import (
	"context"

	"github.com/sluice-cdc/sluice/shared/catalog/chdb"
)

// Conn is one connection to the ClickHouse engine: the embedded chDB engine
// or a ClickHouse server. Every catalog statement is plain SQL that both
// backends run unchanged.
type Conn interface {
	// Exec runs a statement that returns no rows (DDL, INSERT ... SELECT).
	Exec(ctx context.Context, query string) error
	// Query runs a SELECT and returns its rows with values normalized the same
	// way on every backend (see Result).
	Query(ctx context.Context, query string) (*Result, error)
	// Close releases the connection.
	Close() error
}

// Result, Exception and ErrClosed are the engine layer's (package chdb):
// both backends return them, so a caller reads one type whichever it runs on.
type (
	Result    = chdb.Result
	Exception = chdb.Exception
)

// ErrClosed is returned by a closed connection on either backend.
var ErrClosed = chdb.ErrClosed

var _ Conn = (*chdb.Conn)(nil)
