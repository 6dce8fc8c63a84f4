package api

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrBusy is a read refused because http.max_reads reads were in progress
// for all of http.read_queue_wait; the API answers 503 with Retry-After.
var ErrBusy = errors.New("busy")

// readCap bounds the reads of destination rows served at once (a rows page
// each, an export for its whole length): the engine runs one statement at a
// time and a read yields it to the pipeline (chdb.Behind), so reads past a
// few only queue, each holding a connection and its memory.
type readCap struct {
	slots chan struct{}
	wait  time.Duration
}

func newReadCap(n int, wait time.Duration) *readCap {
	if n <= 0 {
		n = 4
	}
	if wait <= 0 {
		wait = 10 * time.Second
	}
	return &readCap{slots: make(chan struct{}, n), wait: wait}
}

// enter takes a slot, waiting up to the cap's wait; the returned func gives
// it back.
func (c *readCap) enter(ctx context.Context) (func(), error) {
	if c == nil { // a handler built without Register (tests)
		return func() {}, nil
	}
	select {
	case c.slots <- struct{}{}:
		return func() { <-c.slots }, nil
	default:
	}
	t := time.NewTimer(c.wait)
	defer t.Stop()
	select {
	case c.slots <- struct{}{}:
		return func() { <-c.slots }, nil
	case <-t.C:
		return nil, fmt.Errorf("%w: %d reads of destination rows are in progress (http.max_reads) and none ended within %s; retry later", ErrBusy, cap(c.slots), c.wait)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
