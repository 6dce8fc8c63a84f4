package state

import "errors"

var (
	// ErrLeaseLost means the caller's lease is no longer live: it expired by
	// the server clock, or another holder (or a newer term) took it over.
	// The caller must stop acting as the lease's owner.
	ErrLeaseLost = errors.New("lease lost")
	// ErrSchemaVersion means the state schema in the database is newer than
	// this build reads.
	ErrSchemaVersion = errors.New("unsupported state schema version")
	// ErrPositionRange means a position does not fit the bigint columns.
	ErrPositionRange = errors.New("position out of range")
	// ErrBadArgument is a caller error (empty name, non-positive TTL, ...).
	ErrBadArgument = errors.New("invalid argument")
	// ErrTransition means a destination lifecycle change is not allowed
	// from the destination's current state (destinations.go).
	ErrTransition = errors.New("destination state change refused")
	// ErrRetired means the destination is retired, which is final.
	ErrRetired = errors.New("destination retired")
)
