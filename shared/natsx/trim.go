package natsx

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// Trim removes the acknowledged prefix of a stream. The data streams keep
// messages by limits (max_age, max_bytes) and refuse publishes when full,
// so without trimming a pipeline that moves more than max_bytes within
// max_age stops (a 30-minute soak filled 2 GiB and stalled). A message may
// go once every consumer that will ever read it has acked it: Trim purges
// below the lowest ack floor among the required consumers — keeping the
// message at the floor itself, which the publisher's frontier reads on
// CHANGES for its Sluice-Through — and does nothing while any of them does
// not exist yet (its messages
// wait for it: a flusher creates its partition's consumer when it first
// claims the partition). A consumer with nothing pending and nothing
// awaiting ack has acked everything up to the last sequence, which is
// sampled before the consumers. The last message is always kept: the
// reader chains publishes on the last message id. It returns how many
// messages it purged.
func Trim(ctx context.Context, js jetstream.JetStream, stream string, required []string) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("trimming %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("trimming %s: %w", stream, err)
	}
	last := info.State.LastSeq
	floor := last
	seen := 0
	l := s.ListConsumers(ctx)
	for ci := range l.Info() {
		if !slices.Contains(required, ci.Name) {
			continue
		}
		seen++
		if ci.NumPending == 0 && ci.NumAckPending == 0 && servedCurrent(info.Cluster, ci.Cluster) {
			continue
		}
		floor = min(floor, ci.AckFloor.Stream)
	}
	if err := l.Err(); err != nil {
		return 0, fmt.Errorf("trimming %s: listing consumers: %w", stream, err)
	}
	if seen < len(required) && !trimUnsafeAnyConsumers {
		return 0, nil
	}
	if floor <= info.State.FirstSeq {
		return 0, nil
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSequence(floor)); err != nil {
		return 0, fmt.Errorf("trimming %s below %d: %w", stream, floor, err)
	}
	return floor - info.State.FirstSeq, nil
}

// trimUnsafeAnyConsumers trims without waiting for every required consumer
// to exist: the negative control of TestTrimWaitsForEveryConsumer.
var trimUnsafeAnyConsumers bool

// servedCurrent reports whether a consumer's leader reads the stream
// leader's copy of the stream, so that its "nothing pending" covers every
// message up to the stream leader's last sequence: only a consumer led by
// the stream leader itself. Any other node's copy can lag: a node catching
// up after a restart, or stalled, and also a replica the stream leader
// reports current with no lag, which counts entries in that node's Raft
// log, not the messages the node has applied to its store (the commit
// reaches it with the next append). Such a node's consumer reports nothing
// pending for messages it has not stored yet, and trimming to the last
// sequence would purge them before it delivers them. A consumer led
// elsewhere holds the floor at its ack floor instead (so an idle partition
// led off the stream leader holds trimming back until it is acked past,
// moves leader, or the stream's max_age removes the messages). A single
// server (no cluster info) is always current.
func servedCurrent(stream, consumer *jetstream.ClusterInfo) bool {
	if stream == nil || consumer == nil {
		return true
	}
	leader := consumer.Leader
	switch {
	case leader == "" || stream.Leader == "":
		return false
	case leader == stream.Leader:
		return true
	case !trimUnsafeTrustReplicas:
		return false
	}
	for _, r := range stream.Replicas {
		if r != nil && r.Name == leader {
			return r.Current && !r.Offline && r.Lag == 0
		}
	}
	return false
}

// trimUnsafeTrustReplicas lets a consumer led by a replica the stream
// leader reports current vouch for the last sequence: the negative control
// of TestServedCurrent.
var trimUnsafeTrustReplicas bool
