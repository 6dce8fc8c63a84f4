package chdb

import (
	"context"
	"sync"
)

// The engine runs one statement at a time, so a heavy read holds every
// other caller: the indexer, the publisher, compaction. A statement whose
// context is marked Behind (the catalog marks every destination read and
// export page) waits for its turn behind every caller not so marked: when
// the engine comes free it goes to the oldest waiting pipeline statement,
// and to the oldest waiting read only when no pipeline statement waits —
// or when reads have been passed over readPassLimit times in a row, so a
// pipeline that never pauses slows reads down without stopping them.
//
// On a ClickHouse server statements run concurrently, and this order does
// not apply; the reads' statement limits (catalog.Options.ReadLimits) and
// the API's read cap (http.max_reads) bound them there.

type behindKey struct{}

// Behind marks ctx's statements as ones that yield the engine to every
// statement not so marked (see turns).
func Behind(ctx context.Context) context.Context {
	return context.WithValue(ctx, behindKey{}, true)
}

// IsBehind reports whether ctx was marked by Behind.
func IsBehind(ctx context.Context) bool {
	b, _ := ctx.Value(behindKey{}).(bool)
	return b
}

// readPassLimit: how many pipeline statements in a row may take the engine
// while a read waits before the read goes first once.
const readPassLimit = 8

// turns hands the engine to one caller at a time: FIFO within each class,
// pipeline before reads (bounded by readPassLimit). The zero value is free.
type turns struct {
	mu     sync.Mutex
	busy   bool
	passed int // pipeline hand-offs in a row while a read waited
	front  []chan struct{}
	behind []chan struct{}
}

// acquire waits for the engine; ctx's end gives up the wait.
func (t *turns) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	if !t.busy {
		t.busy = true
		t.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	back := IsBehind(ctx)
	if back {
		t.behind = append(t.behind, ch)
	} else {
		t.front = append(t.front, ch)
	}
	t.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		t.mu.Lock()
		q := &t.front
		if back {
			q = &t.behind
		}
		for i, w := range *q {
			if w == ch {
				*q = append((*q)[:i], (*q)[i+1:]...)
				t.mu.Unlock()
				return ctx.Err()
			}
		}
		t.mu.Unlock()
		// Handed the engine as the wait ended: pass it on.
		t.release()
		return ctx.Err()
	}
}

// release hands the engine to the next waiter, or frees it.
func (t *turns) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	var next chan struct{}
	switch {
	case len(t.front) > 0 && (len(t.behind) == 0 || t.passed < readPassLimit):
		next, t.front = t.front[0], t.front[1:]
		if len(t.behind) > 0 {
			t.passed++
		}
	case len(t.behind) > 0:
		next, t.behind = t.behind[0], t.behind[1:]
		t.passed = 0
	default:
		t.busy = false
		t.passed = 0
		return
	}
	close(next)
}
