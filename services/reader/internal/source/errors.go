package source

import "errors"

// ErrInvalidSource wraps every validation failure of the source database:
// the reader refuses to start, and the message says what to run.
var ErrInvalidSource = errors.New("invalid source")

// ErrPromoted: the standby source.dsn reaches left recovery while the
// reader decoded from it. The watermarks it writes to source.primary_dsn
// no longer reach it, so the reader stops; the restart's check says what
// to set.
var ErrPromoted = errors.New("the standby source.dsn reaches was promoted: it is a primary now, and source.primary_dsn names another server")
