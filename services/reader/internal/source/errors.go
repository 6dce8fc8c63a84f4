package source

import "errors"

// ErrInvalidSource wraps every validation failure of the source database:
// the reader refuses to start, and the message says what to run.
var ErrInvalidSource = errors.New("invalid source")
