package arrowcodec

import "errors"

// ErrDecode marks a body that is not one valid Arrow IPC stream with exactly
// one record batch. It is permanent: retrying cannot fix the bytes.
var ErrDecode = errors.New("decoding arrow message")

// ErrTooLarge marks a body over the size limit. It wraps ErrDecode.
var ErrTooLarge = errors.New("arrow message too large")
