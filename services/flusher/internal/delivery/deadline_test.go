package delivery

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// deadlineScenario: replica z owns the partition but its lease budget is a
// nanosecond (every renewal is slower than it: the fault is injected, as
// Postgres cannot be made slow on demand), so its local lease deadline has
// always passed. A message arrives through a fetch opened before the
// deadline (the test opens it on z's consumer, with z's fetch loop paused)
// and is handed to z's receive. It returns the rows z buffered and the
// message's delivery count when the test fetches it once more.
func deadlineScenario(t *testing.T, noFetchDeadline bool) (buffered int64, redelivered uint64) {
	e := newEnv(t, func(c *cfgpkg.Config) {
		c.Delivery.Partitions = 1
		c.Delivery.LeaseTTL = 30 * time.Second
	})
	z := e.start(t, "z", func(m *Manager) {
		m.pauseFetch.Store(true)
		m.leaseBudgetFault = time.Nanosecond
		m.noFetchDeadline = noFetchDeadline
	})
	t.Cleanup(z.stop)
	// The lease row is written before the claim registers the partition:
	// wait for the partition itself.
	var p *part
	waitFor(t, 20*time.Second, "z owns the partition", func() bool {
		z.m.mu.Lock()
		defer z.m.mu.Unlock()
		p = z.m.parts[0]
		return p != nil
	})
	z.m.mu.Lock()
	gen := p.c.Gen()
	z.m.mu.Unlock()
	e.publish(t, "d", []pt.Row{{ID: 1, LSN: 100, Seq: 1}})
	fetchOne := func() jetstream.Msg {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			b, err := p.cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for msg := range b.Messages() {
				return msg
			}
		}
		t.Fatal("no message fetched")
		return nil
	}
	z.m.receiveGroup(e.ctx, p, []jetstream.Msg{fetchOne()}, gen)
	buffered = z.m.Status().BufferedRows
	if buffered > 0 {
		return buffered, 0
	}
	z.m.mu.Lock()
	expired, tracked := p.c.Expired(), p.c.Tracked()
	z.m.mu.Unlock()
	if !expired || tracked != 1 {
		t.Fatalf("core expired %v, tracking %d messages; want expired, the nak'd message still pending", expired, tracked)
	}
	meta, err := fetchOne().Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return 0, meta.NumDelivered
}

// TestFetchPastDeadlineNotTracked: a replica past its local lease deadline
// does not buffer a message a fetch delivers; it naks it (it redelivers at
// once) and keeps it pending as nak'd (rule 3).
func TestFetchPastDeadlineNotTracked(t *testing.T) {
	buffered, delivered := deadlineScenario(t, false)
	if buffered != 0 {
		t.Fatalf("past its deadline the replica buffered %d rows", buffered)
	}
	if delivered != 2 {
		t.Fatalf("the message's next delivery is number %d, want 2 (nak'd)", delivered)
	}
}

// TestFetchPastDeadlineNegativeControl: without the deadline rule the same
// replica buffers the message.
func TestFetchPastDeadlineNegativeControl(t *testing.T) {
	if buffered, _ := deadlineScenario(t, true); buffered != 1 {
		t.Fatalf("without the deadline rule the replica buffered %d rows, want 1", buffered)
	}
}
