package delivery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
	"github.com/sluice-cdc/sluice/shared/state"
)

// Lease names.
const (
	memberPrefix = "flusher/member/"
)

// PartitionLease is the lease name of partition p.
func PartitionLease(p int) string { return "flusher/p" + strconv.Itoa(p) }

func newHolderID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "flusher"
	}
	return host + "-" + uuid.NewString()[:8]
}

// ownership keeps the membership lease, renews partition leases, claims a
// fair share of the partitions and releases the excess, every lease_ttl/3.
func (m *Manager) ownership(ctx context.Context) error {
	ttl := m.dc.LeaseTTL
	memberLease, ok, err := m.leases.Acquire(ctx, memberPrefix+m.id, m.id, ttl)
	if err != nil {
		return fmt.Errorf("joining flusher membership: %w", err)
	}
	if !ok {
		return fmt.Errorf("joining flusher membership: holder id %s is in use", m.id)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if !m.abrupt {
			_ = m.leases.Release(rctx, memberLease)
		}
	}()
	every := max(ttl/3, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if nl, err := m.leases.Renew(ctx, memberLease, ttl); err == nil {
			memberLease = nl
		} else if ctx.Err() == nil {
			m.log.Warn("renewing membership lease", "error", err)
			if nl, ok, err := m.leases.Acquire(ctx, memberPrefix+m.id, m.id, ttl); err == nil && ok {
				memberLease = nl
			}
		}
		m.renewPartitions(ctx)
		if err := m.rebalance(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("rebalancing partitions", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (m *Manager) renewPartitions(ctx context.Context) {
	m.mu.Lock()
	var ps []*part
	for _, p := range m.parts {
		if !p.c.Lost() {
			ps = append(ps, p)
		}
	}
	m.mu.Unlock()
	for _, p := range ps {
		m.mu.Lock()
		l := p.lease
		m.mu.Unlock()
		start := time.Now()
		nl, err := m.leases.Renew(ctx, l, m.dc.LeaseTTL)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, state.ErrLeaseLost) {
				m.partitionLost(p, l)
			} else {
				m.log.Warn("renewing partition lease", "partition", p.id, "error", err)
			}
			continue
		}
		m.mu.Lock()
		if p.lease.Term == nl.Term {
			p.lease = nl
			p.deadline = start.Add(m.leaseBudget())
			if p.c.Expired() && time.Now().Before(p.deadline) {
				m.log.Info("partition lease renewed after its deadline: fetching again", "partition", p.id)
				p.c.Renewed()
			}
		}
		m.mu.Unlock()
	}
}

// partitionLost stops consuming p and drops its buffers. Nothing is acked:
// the messages redeliver to the new owner (nak'd now to speed that up).
func (m *Manager) partitionLost(p *part, l state.Lease) {
	m.mu.Lock()
	if p.c.Lost() || p.lease.Term != l.Term {
		m.mu.Unlock()
		return
	}
	m.log.Warn("partition lease lost; dropping its buffers", "partition", p.id, "term", l.Term)
	m.dropPartLocked(p, true)
	delete(m.parts, p.id)
	m.m.ownedPartitions.Set(float64(len(m.parts)))
	cancel := p.cancel
	m.mu.Unlock()
	cancel()
}

func (m *Manager) rebalance(ctx context.Context) error {
	listed := time.Now()
	now, err := m.leases.Now(ctx) // lease liveness is never judged by the local clock
	if err != nil {
		return fmt.Errorf("reading the server clock: %w", err)
	}
	members, err := m.leases.List(ctx, memberPrefix)
	if err != nil {
		return err
	}
	var live []string
	for _, l := range members {
		if l.Expires.After(now) {
			live = append(live, l.Holder)
		}
	}
	sort.Strings(live)
	idx := sort.SearchStrings(live, m.id)
	if idx == len(live) || live[idx] != m.id {
		live = append(live, m.id)
		sort.Strings(live)
		idx = sort.SearchStrings(live, m.id)
	}
	n := m.dc.Partitions
	share := (n + len(live) - 1) / len(live)
	m.mu.Lock()
	m.members = len(live)
	owned := make([]int, 0, len(m.parts))
	for id := range m.parts {
		owned = append(owned, id)
	}
	m.mu.Unlock()
	sort.Ints(owned)

	// Release the excess, highest partitions first, gracefully.
	for len(owned) > share {
		p := owned[len(owned)-1]
		owned = owned[:len(owned)-1]
		m.releasePartition(ctx, p)
	}
	if len(owned) >= share {
		return nil
	}
	// Claim free partitions, starting at an offset that spreads replicas.
	have := map[int]bool{}
	for _, p := range owned {
		have[p] = true
	}
	// A partition lease that expired (or was released) more than a fetch
	// wait ago, or never existed, leaves no fetch of an earlier owner open.
	prev, err := m.leases.List(ctx, "flusher/p")
	if err != nil {
		return err
	}
	quietSince := map[string]bool{}
	for _, l := range prev {
		if l.Expires.Add(fetchWait + drainSlack).After(now) {
			quietSince[l.Name] = false
		}
	}
	start := idx * n / len(live)
	for k := 0; k < n && len(have) < share; k++ {
		p := (start + k) % n
		if have[p] {
			continue
		}
		_, recent := quietSince[PartitionLease(p)]
		ok, err := m.claim(ctx, p, !recent, listed)
		if err != nil {
			return err
		}
		if ok {
			have[p] = true
		}
	}
	return nil
}

// claim acquires partition p, seeds its cursors and starts its fetch loop.
// quiet says that, when the server clock was read (the local time listed,
// before), the partition's lease had been expired for more than a fetch
// wait or had never existed: if the claim returns within TTL/2 of listed,
// no other owner can have held it in between (its lease would still be
// live), so no earlier owner's fetch is open and the partition is drained
// at once; otherwise it waits out a fetch wait (settle).
func (m *Manager) claim(ctx context.Context, id int, quiet bool, listed time.Time) (bool, error) {
	start := time.Now()
	l, ok, err := m.leases.Acquire(ctx, PartitionLease(id), m.id, m.dc.LeaseTTL)
	if err != nil || !ok {
		return false, err
	}
	claimedAt := time.Now()
	// Cursors load when their destinations appear (idle.go loadCursors),
	// not all at the claim: memory is for the active destinations.
	cons, err := m.js.Consumer(ctx, proto.StreamRouted, proto.ConsumerFlusher(id))
	if err != nil {
		cons, err = m.js.CreateOrUpdateConsumer(ctx, proto.StreamRouted, ConsumerConfig(m.dc, id))
	}
	if err != nil {
		_ = m.leases.Release(ctx, l)
		return false, fmt.Errorf("opening consumer of partition %d: %w", id, err)
	}
	fctx, cancel := context.WithCancel(ctx)
	p := &part{id: id, subject: proto.RoutedPartitionSubject(id), lease: l, c: core.NewPartition[*item](id, l.Term, nil, m.mutants()), cons: cons,
		dests: map[string]*dest{}, cancel: cancel, done: make(chan struct{}),
		deadline: start.Add(m.leaseBudget()), claimedAt: claimedAt}
	if m.trace != nil {
		p.c.SetRecorder(m.trace.record)
	}
	if quiet && claimedAt.Sub(listed) < m.dc.LeaseTTL/2 {
		p.c.Drained()
	}
	m.mu.Lock()
	m.parts[id] = p
	m.m.ownedPartitions.Set(float64(len(m.parts)))
	m.mu.Unlock()
	m.log.Debug("partition claimed", "partition", id, "term", l.Term)
	m.fetchers.Add(1)
	go func() { defer m.fetchers.Done(); m.fetchLoop(fctx, p) }()
	return true, nil
}

// settle seeds p once one fetch wait has passed since the claim (Drained:
// a previous owner's fetch opened before its deadline delivers nothing
// more) and no message of its consumer is unacked elsewhere: a
// previous owner that died (or a fetch it abandoned) leaves messages
// ack-pending until AckWait, invisible to this owner's pending set, and a
// cursor advanced meanwhile could pass them (rule 3). The consumer's
// ack-pending count includes everything delivered to this owner too, and
// a message this owner tracks is never acked without leaving its pending
// set first, so once the count is at most the messages tracked here,
// nothing is pending elsewhere. A fetch in flight only makes the count
// larger (seeding later, never early). Called from the fetch loop.
func (m *Manager) settle(ctx context.Context, p *part) {
	m.mu.Lock()
	if !p.c.IsDrained() && time.Since(p.claimedAt) >= fetchWait+drainSlack {
		p.c.Drained()
	}
	due := !p.c.Seeded() && time.Since(p.checkedAt) >= settleEvery
	if due {
		p.checkedAt = time.Now()
	}
	m.mu.Unlock()
	if !due {
		return
	}
	info, err := p.cons.Info(ctx)
	if err != nil {
		return // retried at the next check
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// A held clear is this owner's, delivered and not yet given to the core.
	if p.c.Settle(max(info.NumAckPending-len(p.heldClears), 0)) {
		m.log.Debug("partition settled: its cursors advance", "partition", p.id, "ack_pending", info.NumAckPending)
	}
}

// settleEvery is how often an unseeded partition asks its consumer.
const settleEvery = 250 * time.Millisecond

// drainSlack is added to the fetch wait before a claimed partition counts
// its consumer's ack-pending messages: the server's timer of a fetch
// request and this process's clock need not agree to the millisecond.
const drainSlack = 250 * time.Millisecond

// leaseBudget is how long after a renewal's start its partition may fetch:
// the TTL less leaseMargin.
func (m *Manager) leaseBudget() time.Duration {
	if m.leaseBudgetFault > 0 {
		return m.leaseBudgetFault
	}
	return m.dc.LeaseTTL - leaseMargin(m.dc.LeaseTTL)
}

// leaseMargin is how much earlier than the TTL the local deadline falls: a
// quarter of it, which covers the clocks' rate difference over a TTL and a
// fetch request's way to the server (ARCHITECTURE.md, "The fetch
// deadline"). Renewals run every TTL/3, so one slow renewal does not
// reach it.
func leaseMargin(ttl time.Duration) time.Duration { return ttl / 4 }

// checkDeadlineLocked tells p's core when its local lease deadline has
// passed: it starts no fetch and accepts no fetched message until a
// renewal succeeds in time.
func (m *Manager) checkDeadlineLocked(p *part) {
	if p.c.Lost() || p.c.Expired() || time.Now().Before(p.deadline) {
		return
	}
	m.log.Warn("partition lease deadline passed unrenewed: fetching stops", "partition", p.id, "term", p.lease.Term)
	p.c.Expire()
}

// releasePartition stops fetching p, flushes its buffers, then releases
// its lease.
func (m *Manager) releasePartition(ctx context.Context, id int) {
	m.mu.Lock()
	p, ok := m.parts[id]
	m.mu.Unlock()
	if !ok {
		return
	}
	p.cancel()
	<-p.done
	deadline := time.Now().Add(m.dc.DrainTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		m.mu.Lock()
		busy := false
		for _, d := range p.dests {
			if len(d.c.Live()) > 0 && !d.c.Halted() && !m.heldLocked(d) {
				m.enqueueLocked(d, "rebalance")
				busy = true
			}
			if d.c.Inflight() != nil {
				busy = true
			}
		}
		m.mu.Unlock()
		if !busy {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	m.mu.Lock()
	l := p.lease
	m.dropPartLocked(p, true)
	delete(m.parts, id)
	m.m.ownedPartitions.Set(float64(len(m.parts)))
	m.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := m.leases.Release(rctx, l); err != nil {
		m.log.Warn("releasing partition lease", "partition", id, "error", err)
	}
	m.log.Debug("partition released", "partition", id)
}

// releaseAll releases every partition lease (after the drain).
func (m *Manager) releaseAll() {
	m.mu.Lock()
	var ls []state.Lease
	for _, p := range m.parts {
		ls = append(ls, p.lease)
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, l := range ls {
		_ = m.leases.Release(ctx, l)
	}
}
