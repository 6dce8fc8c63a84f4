package jaeger

import "errors"

// ErrNoTrace: Jaeger has no such trace, or no flush of the destination
// asked for, in the window searched.
var ErrNoTrace = errors.New("no such trace")

// ErrUnreachable: Jaeger did not answer (not running, wrong address, or
// too slow); its error says which.
var ErrUnreachable = errors.New("jaeger unreachable")
