package reader

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/proto"
)

// A full CHANGES stream refuses publishes: the reader restarts its session
// from the confirmed LSN (with backoff) until there is room, and nothing is
// lost or reordered: data messages are stored in position order.
func TestStreamFullNoLossNoReorder(t *testing.T) {
	e := newEnv(t, "public.items")
	e.cfg.NATS.MaxBytes = 48 << 10
	e.cfg.Reader.BatchRows = 20
	e.exec(schemaSQL)
	ctx := context.Background()
	st, err := e.js.Stream(ctx, proto.StreamChanges)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := st.Info(ctx)
	cfg := info.Config
	cfg.MaxBytes = 48 << 10
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	for i := 0; i < 10; i++ {
		e.exec(fmt.Sprintf(`INSERT INTO items SELECT 't', g, repeat('x', 100) FROM generate_series(%d, %d) g`, i*100+1, i*100+100))
	}
	eventually(t, 20*time.Second, func() error {
		if n := testutil.ToFloat64(run.r.metrics.Restarts); n < 1 {
			return fmt.Errorf("no session restart yet")
		}
		return nil
	})
	cfg.MaxBytes = 64 << 20
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	rows := waitRows(t, e, 1000)
	seen := map[int64]bool{}
	var prev proto.Position
	for i, r := range rows {
		seen[r.vals["id"].(int64)] = true
		if r.pos.Less(prev) {
			t.Errorf("row %d at %s stored after %s", i, r.pos, prev)
		}
		prev = r.pos
	}
	if len(seen) != 1000 || len(rows) != 1000 {
		t.Errorf("%d distinct ids in %d rows, want 1000 of 1000", len(seen), len(rows))
	}
	t.Logf("session restarts while full: %v", testutil.ToFloat64(run.r.metrics.Restarts))
}
