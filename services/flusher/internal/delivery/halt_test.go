package delivery

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// Bad input: an undecodable message goes to the DLQ; a permanent flush
// failure halts only its destination; every other destination flows.
func TestBadInputHaltsOnlyItsDestination(t *testing.T) {
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.FlushInterval = 200 * time.Millisecond; c.Delivery.Partitions = 1 })
	r := e.start(t, "a", func(m *Manager) {
		m.putFault = func(_ string, dests []string) error { // a file holding bad's rows the store refuses for good
			if slices.Contains(dests, "bad") {
				return fmt.Errorf("injected: %w", packstore.ErrBadPath)
			}
			return nil
		}
	})
	h := nats.Header{}
	h.Set(proto.HeaderWire, proto.WireVersion)
	if _, err := e.js.PublishMsg(e.ctx, &nats.Msg{Subject: proto.RoutedPartitionSubject(0), Header: h, Data: []byte("not arrow")}); err != nil {
		t.Fatal(err)
	}
	e.publish(t, "bad", []pt.Row{{ID: 1, LSN: 10, Seq: 1}})
	e.publish(t, "good", []pt.Row{{ID: 1, LSN: 11, Seq: 1}})
	waitFor(t, 10*time.Second, "good flushed, bad halted", func() bool {
		st := r.m.Status()
		var good, bad bool
		for _, d := range st.Destinations {
			good = good || d.Destination == "good" && d.LastPack != ""
			bad = bad || d.Destination == "bad" && d.State == StateHalted && d.LastError != ""
		}
		return good && bad
	})
	// The summary `sluice wait` polls lists the halted destination alone.
	if sm := r.m.Summary(); len(sm.Destinations) != 1 || sm.Destinations[0].Destination != "bad" || sm.Destinations[0].State != StateHalted || sm.Destinations[0].LastError == "" {
		t.Fatalf("summary destinations %+v, want bad halted alone", sm.Destinations)
	}
	e.publish(t, "good", []pt.Row{{ID: 2, LSN: 12, Seq: 1}})
	waitFor(t, 10*time.Second, "good keeps flowing", func() bool { return e.cursor(t, "good") == proto.Position{LSN: 12, Seq: 1} })
	if c := e.cursor(t, "bad"); !c.IsZero() {
		t.Fatalf("halted destination's cursor moved to %s", c)
	}
	dlq, err := e.js.OrderedConsumer(e.ctx, proto.StreamDLQ, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := dlq.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject() != proto.DLQSubject("flusher") || msg.Headers().Get(proto.HeaderReason) == "" {
		t.Fatalf("dead letter %s %v", msg.Subject(), msg.Headers())
	}
}
