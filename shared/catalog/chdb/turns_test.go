package chdb

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// queue starts a waiter on t named name and returns once it is queued; its
// name is appended to order when it gets the engine, which it then holds
// until released.
func queue(t *testing.T, tu *turns, ctx context.Context, name string, order *[]string, mu *sync.Mutex) chan error {
	t.Helper()
	done := make(chan error, 1)
	tu.mu.Lock()
	before := len(tu.front) + len(tu.behind)
	tu.mu.Unlock()
	go func() {
		err := tu.acquire(ctx)
		if err == nil {
			mu.Lock()
			*order = append(*order, name)
			mu.Unlock()
		}
		done <- err
	}()
	for {
		tu.mu.Lock()
		n := len(tu.front) + len(tu.behind)
		tu.mu.Unlock()
		if n > before {
			return done
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTurnsPipelineFirst: a read queued before pipeline statements gets
// the engine after them; within a class the order is first come first
// served; after readPassLimit pipeline hand-offs a waiting read goes once.
func TestTurnsPipelineFirst(t *testing.T) {
	var tu turns
	var order []string
	var mu sync.Mutex
	bg := context.Background()
	if err := tu.acquire(bg); err != nil { // the engine is busy
		t.Fatal(err)
	}
	var waits []chan error
	waits = append(waits, queue(t, &tu, Behind(bg), "read1", &order, &mu))
	waits = append(waits, queue(t, &tu, Behind(bg), "read2", &order, &mu))
	for i := range readPassLimit + 2 {
		waits = append(waits, queue(t, &tu, bg, fmt.Sprintf("index%d", i), &order, &mu))
	}
	for range waits {
		tu.release()
		// Wait for the hand-off to land before the next release.
		for {
			mu.Lock()
			n := len(order)
			mu.Unlock()
			tu.mu.Lock()
			q := len(tu.front) + len(tu.behind)
			tu.mu.Unlock()
			if n+q == len(waits) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, w := range waits {
		if err := <-w; err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"index0", "index1", "index2", "index3", "index4", "index5", "index6", "index7", "read1", "index8", "index9", "read2"}
	if !slices.Equal(order, want) {
		t.Fatalf("order %v\nwant  %v", order, want)
	}
	tu.release()
	if tu.busy {
		t.Fatal("engine still busy after the last release")
	}
}

// TestTurnsCancelledWait: a waiter whose context ends leaves the queue,
// and the engine still reaches the next one.
func TestTurnsCancelledWait(t *testing.T) {
	var tu turns
	var order []string
	var mu sync.Mutex
	bg := context.Background()
	if err := tu.acquire(bg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	gone := queue(t, &tu, ctx, "cancelled", &order, &mu)
	next := queue(t, &tu, Behind(bg), "read", &order, &mu)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	tu.release()
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	tu.release()
	if !slices.Equal(order, []string{"read"}) || tu.busy {
		t.Fatalf("order %v busy %v", order, tu.busy)
	}
}

// TestEngineServesPipelineBeforeReads: on the real engine, while one
// statement runs, a read queued first and a pipeline statement queued after
// it: the pipeline statement runs first. Its control: the same read not
// marked Behind runs first, in arrival order.
func TestEngineServesPipelineBeforeReads(t *testing.T) {
	if !runInChild(t, 2*time.Minute) {
		return
	}
	c, err := Open(filepath.Join(t.TempDir(), "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	run := func(markRead bool) []string {
		bg := context.Background()
		var mu sync.Mutex
		var order []string
		var wg sync.WaitGroup
		stmt := func(ctx context.Context, name, q string) {
			defer wg.Done()
			if _, err := c.Query(ctx, q); err != nil {
				t.Error(name, err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}
		waiting := func(n int) {
			for {
				c.eng.turn.mu.Lock()
				q := len(c.eng.turn.front) + len(c.eng.turn.behind)
				c.eng.turn.mu.Unlock()
				if q == n {
					return
				}
				time.Sleep(time.Millisecond)
			}
		}
		wg.Add(3)
		go stmt(bg, "first", "SELECT sleep(1.5)")
		for {
			c.eng.turn.mu.Lock()
			busy := c.eng.turn.busy
			c.eng.turn.mu.Unlock()
			if busy {
				break
			}
			time.Sleep(time.Millisecond)
		}
		rctx := bg
		if markRead {
			rctx = Behind(bg)
		}
		go stmt(rctx, "read", "SELECT count() FROM numbers(1000)")
		waiting(1)
		go stmt(bg, "pipeline", "SELECT 1")
		waiting(2)
		wg.Wait()
		return order
	}
	if got := run(true); !slices.Equal(got, []string{"first", "pipeline", "read"}) {
		t.Fatalf("read marked Behind: order %v, want the pipeline statement before the read", got)
	}
	if got := run(false); !slices.Equal(got, []string{"first", "read", "pipeline"}) {
		t.Fatalf("control, read not marked: order %v, want arrival order", got)
	}
}
