package reader

import "errors"

var (
	// ErrConfig: the configuration cannot run a reader.
	ErrConfig = errors.New("reader configuration")
	// ErrLeaseLost: another replica took over the slot's lease.
	ErrLeaseLost = errors.New("reader lease lost")
)
