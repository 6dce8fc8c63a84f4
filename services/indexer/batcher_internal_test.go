package indexer

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/config"
)

// runBatcher runs the batcher of an indexer with only what it needs (its
// config and queue) and a recording index step in place of the catalog
// (the test is about when batches close, not about indexing); batches
// receives the size of each batch as it is indexed.
func runBatcher(t *testing.T, wait time.Duration, queued ...item) (batches chan int) {
	t.Helper()
	cfg := config.Default()
	cfg.Indexer.BatchWait = wait
	ix := &Indexer{cfg: cfg, queue: make(chan item, 16)}
	batches = make(chan int, 16)
	ix.indexBatch = func(_ context.Context, b []item) { batches <- len(b) }
	for _, it := range queued {
		ix.queue <- it
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ix.batcher(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return batches
}

// TestBatchWaitCountsFromQueued: batch_wait counts from when a batch's
// first pack was queued. Three packs that have already waited longer than
// batch_wait (behind a slow batch) are indexed at once, in one batch; the
// control, packs queued just now, wait for batch_wait.
func TestBatchWaitCountsFromQueued(t *testing.T) {
	const wait = time.Hour
	old := time.Now().Add(-2 * wait)
	batches := runBatcher(t, wait, item{queued: old}, item{queued: old}, item{queued: old})
	select {
	case n := <-batches:
		if n != 3 {
			t.Fatalf("overdue packs indexed in a batch of %d, want all 3 together", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("packs queued longer than batch_wait ago were not indexed: batch_wait restarted when the batcher got to them")
	}

	fresh := runBatcher(t, wait, item{queued: time.Now()})
	select {
	case n := <-fresh:
		t.Fatalf("control: a pack queued just now was indexed (batch of %d) before batch_wait", n)
	case <-time.After(200 * time.Millisecond):
	}
}
