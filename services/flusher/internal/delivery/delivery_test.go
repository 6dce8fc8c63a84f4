package delivery

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	cfgpkg "github.com/sluice-cdc/sluice/shared/config"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

func TestFlushEndToEnd(t *testing.T) {
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.FlushInterval = 300 * time.Millisecond })
	r := e.start(t, "a", nil)
	e.publish(t, "shop1", []pt.Row{{ID: 1, LSN: 10, Seq: 1}, {ID: 2, LSN: 10, Seq: 2}})
	e.publish(t, "shop1", []pt.Row{{ID: 1, LSN: 20, Seq: 1, Op: proto.OpDelete}})
	e.publish(t, "shop2", []pt.Row{{ID: 7, LSN: 15, Seq: 1}})
	waitFor(t, 10*time.Second, "packs", func() bool {
		return e.cursor(t, "shop1") == (proto.Position{LSN: 20, Seq: 1}) && e.cursor(t, "shop2") == (proto.Position{LSN: 15, Seq: 1})
	})
	// shop1's insert of id 1 was resolved away by its delete; the
	// tombstone stays.
	p := e.packed(t, "shop1")
	if p[1] != (proto.Position{LSN: 20, Seq: 1}) || p[2] != (proto.Position{LSN: 10, Seq: 2}) {
		t.Fatalf("shop1 packs hold %v", p)
	}
	// One pack event per pack, with the contract's msg id and headers.
	cons, err := e.js.OrderedConsumer(e.ctx, proto.StreamPacks, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := arrowcodec.Decode(msg.Data(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	// One event per segment, one row per destination it holds (shop1 and
	// shop2 share one when they flush in one group commit).
	if !rec.Schema().Equal(proto.PackEventSchema) || rec.NumRows() < 1 || rec.NumRows() > 2 || msg.Subject() != proto.SegmentEventSubject("public.items") {
		t.Fatalf("pack event on %s: %d rows, schema %v", msg.Subject(), rec.NumRows(), rec.Schema())
	}
	h := msg.Headers()
	if h.Get(proto.HeaderWire) != proto.WireVersion || h.Get(proto.HeaderTable) != "public.items" || h.Get(proto.HeaderMsgID)[:2] != "p:" || h.Get("traceparent") == "" && false {
		t.Fatalf("pack event headers %v", h)
	}
	waitFor(t, 5*time.Second, "acks", func() bool {
		a, _ := e.ackPending(t, 0)
		b, _ := e.ackPending(t, 1)
		return a+b == 0
	})
	st := r.m.Status()
	if _, err := json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	if len(st.OwnedPartitions) != 2 || st.Destinations[0].State != StateHealthy || st.Destinations[0].LastPack == "" {
		t.Fatalf("status %+v", st)
	}
	if testutil.ToFloat64(r.m.m.triggers.WithLabelValues("interval")) < 2 {
		t.Fatal("interval trigger not counted")
	}
}

// The trigger matrix: each trigger alone makes a flush while the interval
// (one hour) never fires.
func TestTriggerMatrix(t *testing.T) {
	cases := []struct {
		name    string
		trigger string
		mod     func(*cfgpkg.Config)
		msgs    int
	}{
		{"rows", "rows", func(c *cfgpkg.Config) { c.Delivery.FlushRows = 3 }, 3},
		{"bytes", "bytes", func(c *cfgpkg.Config) { c.Delivery.FlushBytes = 1 }, 1},
		{"memory", "memory", func(c *cfgpkg.Config) { c.Delivery.MemoryBudget = 4000 }, 4},
		{"ack_pending", "ack_pending", func(c *cfgpkg.Config) { c.Delivery.MaxAckPending = 8; c.Delivery.Partitions = 1 }, 8},
		{"interval", "interval", func(c *cfgpkg.Config) { c.Delivery.FlushInterval = 200 * time.Millisecond }, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.mod)
			r := e.start(t, "a", nil)
			for i := 0; i < tc.msgs; i++ {
				e.publish(t, "d", []pt.Row{{ID: int64(i), LSN: uint64(10 + i), Seq: 1}})
			}
			waitFor(t, 10*time.Second, tc.trigger+" trigger", func() bool {
				return testutil.ToFloat64(r.m.m.triggers.WithLabelValues(tc.trigger)) > 0 &&
					testutil.ToFloat64(r.m.m.flushes.WithLabelValues("ok")) > 0
			})
		})
	}
	t.Run("shutdown", func(t *testing.T) {
		e := newEnv(t, nil)
		r := e.start(t, "a", nil)
		e.publish(t, "x", []pt.Row{{ID: 1, LSN: 5, Seq: 1}})
		waitFor(t, 5*time.Second, "buffered", func() bool { return r.m.Status().BufferedRows == 1 })
		r.stop()
		if !e.allPacked(t) {
			t.Fatal("drain did not flush the buffer")
		}
		if got := testutil.ToFloat64(r.m.m.triggers.WithLabelValues("shutdown")); got != 1 {
			t.Fatalf("shutdown trigger %v", got)
		}
	})
}

// A flush in flight does not block new messages: they land in a fresh
// buffer and flush after it.
func TestBufferSwapDuringFlight(t *testing.T) {
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.FlushRows = 1; c.Delivery.Partitions = 1 })
	gate := make(chan struct{})
	entered := make(chan struct{}, 10)
	r := e.start(t, "a", func(m *Manager) {
		first := true
		m.beforeAck = func(string) {
			if first {
				first = false
				entered <- struct{}{}
				<-gate
			}
		}
	})
	e.publish(t, "d", []pt.Row{{ID: 1, LSN: 10, Seq: 1}})
	<-entered
	e.publish(t, "d", []pt.Row{{ID: 2, LSN: 20, Seq: 1}})
	e.publish(t, "d", []pt.Row{{ID: 3, LSN: 30, Seq: 1}})
	waitFor(t, 5*time.Second, "live buffer during flight", func() bool {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		d := r.m.dests["d"]
		return d != nil && d.c.Inflight() != nil && len(d.c.Live()) == 2
	})
	if st := r.m.Status(); st.Destinations[0].State != StateFlushing || st.Destinations[0].BufferedRows != 3 {
		t.Fatalf("status during flight: %+v", st.Destinations[0])
	}
	close(gate)
	waitFor(t, 5*time.Second, "second flush", func() bool { return e.cursor(t, "d") == proto.Position{LSN: 30, Seq: 1} })
	if !e.allPacked(t) {
		t.Fatal("rows missing")
	}
}
