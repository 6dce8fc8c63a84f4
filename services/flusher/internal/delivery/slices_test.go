package delivery

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
	"github.com/sluice-cdc/sluice/shared/state"
)

// A partition message holding two destinations' rows is acked only when
// both slices are durable: with one destination paused, the other's slice
// is flushed and its cursor advanced, but the message stays ack-pending
// until the paused one is resumed and flushed too (real JetStream).
func TestPartitionMessageAckedWhenEverySliceDurable(t *testing.T) {
	if err := twoSliceScenario(t, false); err != nil {
		t.Fatal(err)
	}
}

// The negative control: a message acked when its first slice commits
// (core.AckFirstSlice) is acked while the paused destination's rows are in
// no pack; its nak'd or held slice would never come back.
func TestPartitionMessageAckFirstSliceNegativeControl(t *testing.T) {
	err := twoSliceScenario(t, true)
	if err == nil {
		t.Fatal("with the first slice's commit acking the message, no early ack was seen: the test cannot catch it")
	}
	t.Logf("caught as expected: %v", err)
}

func twoSliceScenario(t *testing.T, ackFirst bool) error {
	e, ds := lifecycleEnv(t)
	setState(t, e, ds, "pa", state.Paused)
	r := e.startLifecycle(t, ds, func(m *Manager) { m.ackFirstSlice = ackFirst })
	e.publishParts(t, destRows{"ac", []pt.Row{{ID: 1, LSN: 10, Seq: 1}}}, destRows{"pa", []pt.Row{{ID: 2, LSN: 11, Seq: 1}}})
	waitFor(t, 10*time.Second, "ac flushed", func() bool {
		return e.cursor(t, "ac") == (proto.Position{LSN: 10, Seq: 1}) && testutilValue(r.m, "ok") >= 1
	})
	early := func() error {
		if pend, _ := e.ackPending(t, 0); pend == 0 && len(e.packed(t, "pa")) == 0 {
			return fmt.Errorf("the message was acked while pa's slice is in no pack")
		}
		return nil
	}
	if ackFirst {
		// The early ack is on its way; wait for the consumer to count it.
		var err error
		eventually(5*time.Second, func() bool { err = early(); return err != nil })
		return err
	}
	if err := early(); err != nil {
		return err
	}
	if pend, _ := e.ackPending(t, 0); pend != 1 {
		return fmt.Errorf("ack-pending %d with pa's slice held, want 1", pend)
	}
	if st := destStatus(r.m, "pa"); st.BufferedRows != 1 {
		return fmt.Errorf("paused pa buffers %d rows, want 1", st.BufferedRows)
	}
	setState(t, e, ds, "pa", state.Active)
	waitFor(t, 10*time.Second, "pa flushed and the message acked", func() bool {
		pend, _ := e.ackPending(t, 0)
		return pend == 0 && e.allPacked(t) && e.cursor(t, "pa") == (proto.Position{LSN: 11, Seq: 1})
	})
	return nil
}

// A per-destination message left in the stream from before partition
// messages (sluice.routed.<p>.<dest>) is read as a one-slice message:
// flushed, its cursor advanced, acked.
func TestLegacyPerDestinationMessageFlushed(t *testing.T) {
	e, ds := lifecycleEnv(t)
	e.startLifecycle(t, ds, nil)
	e.publishLegacy(t, "old", []pt.Row{{ID: 1, LSN: 10, Seq: 1}})
	e.publish(t, "old", []pt.Row{{ID: 2, LSN: 11, Seq: 1}})
	// The consumer exists once anything is flushed (the claim creates it),
	// so its ack-pending count is asked last.
	waitFor(t, 10*time.Second, "both flushed and acked", func() bool {
		if !e.allPacked(t) || e.cursor(t, "old") != (proto.Position{LSN: 11, Seq: 1}) {
			return false
		}
		pend, _ := e.ackPending(t, 0)
		return pend == 0
	})
}

// eventually retries cond until it holds or timeout passes, and reports
// whether it held.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// A partition consumer created before partition messages (one filter,
// sluice.routed.<p>.>) is updated in place to filter partition messages
// too, keeping its ack floor.
func TestConsumerUpgradedToPartitionMessages(t *testing.T) {
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.Partitions = 1 })
	old := ConsumerConfig(e.cfg.Delivery, 0)
	old.FilterSubjects, old.FilterSubject = nil, proto.RoutedPartitionFilter(0)
	if _, err := e.js.CreateOrUpdateConsumer(e.ctx, proto.StreamRouted, old); err != nil {
		t.Fatal(err)
	}
	if err := EnsureConsumers(e.ctx, e.js, e.cfg.Delivery); err != nil {
		t.Fatal(err)
	}
	c, err := e.js.Consumer(e.ctx, proto.StreamRouted, proto.ConsumerFlusher(0))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Config.FilterSubjects; len(got) != 2 || got[0] != proto.RoutedPartitionSubject(0) || got[1] != proto.RoutedPartitionFilter(0) {
		t.Fatalf("filter subjects %v (filter %q)", got, info.Config.FilterSubject)
	}
}
