package route

import "errors"

var (
	// ErrTooLarge marks a single row whose encoded body exceeds the payload
	// limit. Permanent.
	ErrTooLarge = errors.New("row too large for max payload")
	// ErrNoMsgID marks an input without Nats-Msg-Id and without stream
	// metadata to derive output ids from. Permanent.
	ErrNoMsgID = errors.New("input has no message id")
	// ErrClearBarrier marks a table-wide clear whose earlier messages were
	// not all routed in time. Transient: the clear is retried.
	ErrClearBarrier = errors.New("clear waits for earlier batches")
)
