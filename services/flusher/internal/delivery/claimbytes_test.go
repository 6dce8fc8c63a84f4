package delivery

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/proto"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// TestClaimBytesCountInBudget: values carried by reference are read whole
// at the flush, so the flusher counts them at their size (the batch's
// Sluice-Claim-Bytes) from the moment it receives the batch: a destination
// buffering 8 MiB of them shows 8 MiB buffered, and a memory budget below
// that flushes it at once. The control is the same row without the header
// (a batch from a reader before it): only its own bytes are counted, and
// the budget is not reached.
func TestClaimBytesCountInBudget(t *testing.T) {
	const claimed = 8 << 20
	for _, tc := range []struct {
		name   string
		header bool
	}{{"with the header", true}, {"control, without", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			if tc.header {
				e.header = nats.Header{proto.HeaderClaimBytes: {strconv.Itoa(claimed)}}
			}
			r := e.start(t, "a", nil)
			e.publish(t, "d", []pt.Row{{ID: 1, LSN: 10, Seq: 1}})
			waitFor(t, 10*time.Second, "buffered", func() bool { return r.m.Status().BufferedRows == 1 })
			got := r.m.Status().BufferedBytes
			if tc.header && got < claimed {
				t.Fatalf("buffered %d bytes, want at least the %d carried by reference", got, claimed)
			}
			if !tc.header && got >= 1<<20 {
				t.Fatalf("control: buffered %d bytes for one small row", got)
			}
		})
	}
	t.Run("the budget flushes it", func(t *testing.T) {
		e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.MemoryBudget = 4 << 20 })
		e.header = nats.Header{proto.HeaderClaimBytes: {strconv.Itoa(claimed)}}
		r := e.start(t, "a", nil)
		e.publish(t, "d", []pt.Row{{ID: 1, LSN: 10, Seq: 1}})
		waitFor(t, 10*time.Second, "memory trigger", func() bool {
			return testutil.ToFloat64(r.m.m.triggers.WithLabelValues("memory")) > 0 &&
				testutil.ToFloat64(r.m.m.flushes.WithLabelValues("ok")) > 0
		})
	})
}
