package natsx

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
)

// trimScenario: ten messages in each of two ROUTED partitions; partition
// 0's consumer reads and acks its ten, partition 1's consumer does not
// exist yet. Trim must keep partition 1's messages until its consumer
// exists and has acked them. It returns how many of partition 1's
// messages its consumer, created after the first trim, can still read.
func trimScenario(t *testing.T, anyConsumers bool) int {
	e := startJS(t)
	ctx := ctxT(t)
	trimUnsafeAnyConsumers = anyConsumers
	t.Cleanup(func() { trimUnsafeAnyConsumers = false })
	for i := range 20 {
		msg := &nats.Msg{Subject: proto.RoutedSubject(i%2, "d"+strconv.Itoa(i%2)), Data: []byte("x"),
			Header: nats.Header{proto.HeaderMsgID: {"m" + strconv.Itoa(i)}}}
		if _, err := e.js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	consumer := func(p int) jetstream.Consumer {
		c, err := e.js.CreateOrUpdateConsumer(ctx, proto.StreamRouted, jetstream.ConsumerConfig{
			Durable: proto.ConsumerFlusher(p), FilterSubject: proto.RoutedPartitionFilter(p), AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ackN := func(c jetstream.Consumer, n int) int {
		b, err := c.Fetch(n, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range b.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			got++
		}
		return got
	}
	required := []string{proto.ConsumerFlusher(0), proto.ConsumerFlusher(1)}
	if n := ackN(consumer(0), 10); n != 10 {
		t.Fatalf("partition 0 read %d", n)
	}
	if _, err := Trim(ctx, e.js, proto.StreamRouted, required); err != nil {
		t.Fatal(err)
	}
	c1 := consumer(1)
	got := ackN(c1, 4)
	// Partition 1's consumer now exists with 4 acked: the trim keeps
	// everything from its first unacked message.
	if _, err := Trim(ctx, e.js, proto.StreamRouted, required); err != nil {
		t.Fatal(err)
	}
	// The message at the ack floor stays: the frontier reads it.
	ci, err := c1.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := e.js.Stream(ctx, proto.StreamRouted)
	if _, err := s.GetMsg(ctx, ci.AckFloor.Stream); err != nil {
		t.Fatalf("the message at partition 1's ack floor (%d) was trimmed: %v", ci.AckFloor.Stream, err)
	}
	got += ackN(c1, 20)
	// Everything acked: only the last message stays.
	if _, err := Trim(ctx, e.js, proto.StreamRouted, required); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 || info.State.LastSeq != 20 {
		t.Fatalf("after acking everything the stream holds %d messages (last %d), want only the last", info.State.Msgs, info.State.LastSeq)
	}
	return got
}

// TestTrimWaitsForEveryConsumer: a trimmed stream loses no message that a
// required consumer has not acked, including one of a consumer that does
// not exist yet; once all is acked, the stream holds only its last message.
func TestTrimWaitsForEveryConsumer(t *testing.T) {
	if got := trimScenario(t, false); got != 10 {
		t.Fatalf("partition 1's consumer read %d of its 10 messages", got)
	}
}

// TestTrimNegativeControl: trimming as soon as the consumers that exist
// have acked purges the messages of the partition nobody claimed yet.
func TestTrimNegativeControl(t *testing.T) {
	if got := trimScenario(t, true); got == 10 {
		t.Fatal("trimming without every consumer lost nothing: the control did not bite")
	}
}

// A consumer served by a node whose copy of the stream may lag cannot vouch
// for the messages it has not got: only a consumer led by the stream leader
// lets the trim pass its ack floor (the cluster tests' findings: a
// catching-up node reported nothing pending and the trim purged CHANGES
// messages the router never read; and a replica reported current with no
// lag counts its Raft log, not what it has applied). The negative control
// (trimUnsafeTrustReplicas) trusts a current replica.
func TestServedCurrent(t *testing.T) {
	stream := &jetstream.ClusterInfo{Leader: "n1", Replicas: []*jetstream.PeerInfo{
		{Name: "n2", Current: true}, {Name: "n3", Current: false, Lag: 40},
	}}
	cases := []struct {
		name             string
		stream, consumer *jetstream.ClusterInfo
		want, unsafe     bool
	}{
		{"single server", nil, nil, true, true},
		{"led by the stream leader", stream, &jetstream.ClusterInfo{Leader: "n1"}, true, true},
		{"led by a current replica", stream, &jetstream.ClusterInfo{Leader: "n2"}, false, true},
		{"led by a lagging replica", stream, &jetstream.ClusterInfo{Leader: "n3"}, false, false},
		{"led by an unknown node", stream, &jetstream.ClusterInfo{Leader: "n4"}, false, false},
		{"no consumer leader", stream, &jetstream.ClusterInfo{}, false, false},
		{"no stream leader", &jetstream.ClusterInfo{}, &jetstream.ClusterInfo{Leader: "n1"}, false, false},
	}
	for _, unsafe := range []bool{false, true} {
		trimUnsafeTrustReplicas = unsafe
		for _, tc := range cases {
			want := tc.want
			if unsafe {
				want = tc.unsafe
			}
			if got := servedCurrent(tc.stream, tc.consumer); got != want {
				t.Errorf("%s (unsafe %v): servedCurrent = %v, want %v", tc.name, unsafe, got, want)
			}
		}
	}
	trimUnsafeTrustReplicas = false
}
