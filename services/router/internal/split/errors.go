package split

import "errors"

// Every error Split returns describes the batch, not the moment: retrying the
// same batch fails the same way, so callers treat them as permanent.
var (
	// ErrNoRoutingColumn: the schema names no routing column, or names one
	// the batch does not carry.
	ErrNoRoutingColumn = errors.New("no routing column")
	// ErrRoutingType: the routing column has a type the router cannot route by.
	ErrRoutingType = errors.New("unsupported routing column type")
	// ErrSystemColumn: a system column (_sluice_op, _sluice_lsn,
	// _sluice_seq) is missing or has the wrong type.
	ErrSystemColumn = errors.New("bad system column")
)
