package natsx

import (
	"math/rand/v2"
	"time"
)

// Backoff bounds.
const (
	BackoffBase = 100 * time.Millisecond
	BackoffMax  = 30 * time.Second
)

// Backoff returns the delay before retry number attempt (1 = the first
// retry): exponential in attempt, capped at BackoffMax, with full jitter
// over the upper half ([d/2, d)) so a retry never comes immediately.
func Backoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := BackoffMax
	if attempt < 30 {
		if e := BackoffBase << (attempt - 1); e > 0 && e < BackoffMax {
			d = e
		}
	}
	half := d / 2
	return half + rand.N(d-half)
}

// Sleep waits d or until ctx ends; it reports whether the full d elapsed:
// the wait of every retry and poll loop, `if !natsx.Sleep(ctx,
// natsx.Backoff(attempt)) { return }`.
func Sleep(ctx interface{ Done() <-chan struct{} }, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
