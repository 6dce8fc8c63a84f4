package publisher_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/services/publisher"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/config"
)

// TestPublishesOutlastSlowCompaction (issue 32): a compaction pass that
// takes longer than the publisher lease's TTL and than
// catalog.compact_interval (on a busy machine, a pass over a backfilled
// table: measured 27 s against the 10 s TTL while the pipeline caught up
// after pgbench) loses the lease and fails. The publisher must still
// publish what the indexer adds between passes. Before the fix it
// re-acquired the lease and ran the next pass at once, before any
// publish, for ever: packs indexed after the first failed pass were never
// published, and `sluice wait` never returned. The slow pass is made by a
// hook that sleeps at the start of each pass (a real pass is slow only on
// a loaded machine, which a test cannot order); what follows it is the
// real compaction, whose lease renewal then finds the lease expired.
func TestPublishesOutlastSlowCompaction(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg := config.Default()
	cfg.Delivery.Partitions = 1
	cfg.Publisher.Interval = 30 * time.Millisecond
	const ttl = 500 * time.Millisecond
	cfg.Publisher.LeaseTTL = ttl
	cfg.Catalog.CompactInterval, cfg.Catalog.CompactMinPacks = 50*time.Millisecond, 2
	cfg.Catalog.GCInterval = time.Hour
	js, conn, cat, store := lifecycleRig(ctx, t, cfg)
	index := func(dest string, n int) {
		t.Helper()
		var refs []catalog.PackRef
		for i := range n {
			m := catalogtest.Write(t, store, catalogtest.Items, dest, fmt.Sprintf("%s-pk%d", dest, i), []catalogtest.Row{
				catalogtest.Ins(uint64(50+i), 1, map[string]any{"id": int64(i), "tenant": dest, "name": fmt.Sprint("v", i)}),
			})
			ref, err := catalog.ReadRef(ctx, store, m.Path())
			if err != nil {
				t.Fatal(err)
			}
			refs = append(refs, ref)
		}
		if _, err := cat.Index(ctx, store, refs); err != nil {
			t.Fatal(err)
		}
	}
	// Four packs of one destination: a compaction candidate from the first
	// snapshot on.
	index("shop1", 4)
	pb, err := publisher.New(cfg, publisher.Deps{JS: js, Catalog: conn, Metrics: prometheus.NewRegistry(), Packs: store})
	if err != nil {
		t.Fatal(err)
	}
	var passes atomic.Int64
	publisher.SetCompactionHook(pb, func() {
		passes.Add(1)
		time.Sleep(ttl + ttl/2) // longer than the TTL and the interval
	})
	done := make(chan error, 1)
	go func() { done <- pb.Run(ctx) }()
	members := func(dest string) (int, error) {
		s, err := cat.Latest(ctx)
		if err != nil {
			return 0, err
		}
		ms, err := cat.Members(ctx, s.Version, dest, "")
		return len(ms), err
	}
	eventually(t, "the first snapshot and a failed compaction pass", func() error {
		n, err := members("shop1")
		if err != nil || n != 4 || passes.Load() < 2 {
			return fmt.Errorf("shop1 members %d (%v), passes %d", n, err, passes.Load())
		}
		return nil
	})
	// Indexed now, between failing passes: the next publish must take it.
	index("shop2", 1)
	at := time.Now()
	eventually(t, "a publish of the pack indexed between slow passes", func() error {
		if n, err := members("shop2"); err != nil || n != 1 {
			return fmt.Errorf("shop2 members %d (%v); %d compaction passes so far; publisher %+v", n, err, passes.Load(), pb.Status())
		}
		return nil
	})
	t.Logf("published %s after it was indexed; %d slow passes", time.Since(at).Round(time.Millisecond), passes.Load())
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
