package workload

import "errors"

// ErrBadOptions is returned for Options that cannot run.
var ErrBadOptions = errors.New("workload: bad options")
