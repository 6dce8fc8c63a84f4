package delivery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/state"
)

// Group commit: workers resolve (CPU); one committer takes every resolved
// flush waiting (up to commitBatchMax) and makes the group durable and
// visible with shared round trips, in the same order as a single flush:
//
//  1. one segment per (table, schema) holding every flush's rows of it,
//     grouped by destination, encoded in parallel across segments
//     (segment.go), all written with one group of fsyncs
//     (packstore.BatchPutter);
//  2. every cursor advanced in one fenced, monotonic statement
//     (state.Cursors.AdvanceMany);
//  3. one PACKS event per segment published asynchronously, all PubAcks
//     awaited;
//  4. every lease of the group checked live in one query, right before
//  5. acking.
//
// A flush whose batched step fails falls back to the one-at-a-time step
// (with its retries; a failed segment write: its parts written as
// segments of its destination alone), so failure handling is exactly
// runFlush's. A flush is still serial per destination: it stays in flight
// until committed.
//
// A group's fixed costs (the group of fsyncs, the cursor statement, the
// PubAck round trips, the lease query) are paid once per group and the
// committer runs one group at a time, so the group takes every resolved
// flush waiting, up to commitBatchMax: when thousands of destinations fall
// due together (one flush interval at 10,000 tenants) they commit in a few
// groups, not in tenants/512 serial ones. A group writes one segment per
// table whatever its destinations, so files per second follow group
// commits, not tenants: a segment's PACKS event has one row per
// destination, LZ4-compressed (its pack id, path, table and schema repeat
// on every row), and a segment closes only when its event's estimated
// size (eventEntryCost per destination) would pass half of
// nats.max_payload — 200-character destination names, the longest there
// are, fit about 2,000 to a segment at the 1 MiB default.
const (
	commitBatchMax  = 4096           // flushes per group commit
	commitQueue     = 8192           // resolved flushes waiting for the committer
	segmentMaxDests = commitBatchMax // destinations per segment, at most
	eventEntryCost  = 64             // a PACKS event row's bytes beyond its destination's name, compressed: positions, counts, offsets
	putParallel     = 16             // concurrent one-at-a-time segment writes (fallback, non-batch stores)
)

// compressEventsFrom: a PACKS event of this many destinations or more is
// LZ4-compressed (packEvent says why not zstd).
const compressEventsFrom = 16

// manyCursors is the batch cursor write of state.Cursors.
type manyCursors interface {
	AdvanceMany(ctx context.Context, advs []state.CursorAdvance) ([]state.AdvanceResult, error)
}

// prepareFlush resolves job on the calling worker and hands it to the
// committer; a failure to resolve fails the flush here.
func (m *Manager) prepareFlush(ctx context.Context, job *flushJob) {
	m.beginFlush(ctx, job)
	parts, held, err := m.resolveParts(job)
	if err != nil {
		m.endFlush(job, err)
		return
	}
	// Resolved rows waiting for the committer count against the memory
	// budget until the flush ends (so the watermark and backpressure see
	// them).
	job.parts, job.heldBytes = parts, held
	m.mu.Lock()
	m.totalBytes += held
	m.mu.Unlock()
	select {
	case m.commitQ <- job:
	case <-ctx.Done():
		m.endGroupFlush(job, fmt.Errorf("queueing flush of %s: %w", job.d.name, ctx.Err()))
	}
}

// endGroupFlush ends a flush that went through prepareFlush.
func (m *Manager) endGroupFlush(job *flushJob, err error) {
	if job.heldBytes != 0 {
		m.mu.Lock()
		m.totalBytes -= job.heldBytes
		m.mu.Unlock()
	}
	releaseParts(job.parts)
	job.parts, job.heldBytes = nil, 0
	m.endFlush(job, err)
}

// committer runs group commits until commitQ is closed (after the workers
// stopped), so every queued flush ends either committed or failed.
func (m *Manager) committer(ctx context.Context) {
	for job := range m.commitQ {
		if m.beforeGroup != nil {
			m.beforeGroup()
		}
		batch := []*flushJob{job}
	more:
		for len(batch) < commitBatchMax {
			select {
			case j, ok := <-m.commitQ:
				if !ok {
					break more
				}
				batch = append(batch, j)
			default:
				break more
			}
		}
		m.commitGroup(ctx, batch)
	}
}

func (m *Manager) commitGroup(ctx context.Context, jobs []*flushJob) {
	m.m.groupSize.Observe(float64(len(jobs)))
	errs := make([]error, len(jobs))
	outs := make([][]*segOut, len(jobs))
	t0 := time.Now()
	segs := m.groupSegments(jobs, errs)
	if m.afterSegments != nil {
		m.afterSegments(len(jobs), len(segs))
	}
	t1 := time.Now()
	m.putGroup(ctx, jobs, segs, outs, errs)
	m.stepsDone(jobs, errs, core.StepWrite)
	t2 := time.Now()
	m.advanceGroup(ctx, jobs, errs)
	t3 := time.Now()
	m.publishGroup(ctx, jobs, outs, errs)
	m.stepsDone(jobs, errs, core.StepPublish)
	t4 := time.Now()
	if !m.noAckFence {
		m.checkLeases(ctx, jobs, errs)
	}
	t5 := time.Now()
	defer func() {
		m.log.Debug("group commit", "flushes", len(jobs), "segments", len(segs), "encode", t1.Sub(t0), "put", t2.Sub(t1),
			"cursors", t3.Sub(t2), "publish", t4.Sub(t3), "leases", t5.Sub(t4), "ack", time.Since(t5))
	}()
	// The acks of the whole group under one lock: thousands of flushes
	// taking the manager's lock one by one, against the fetch loops, was
	// most of a large group's ack time.
	if m.noAckFence && m.beforeAck != nil {
		for i, job := range jobs {
			if errs[i] == nil {
				m.beforeAck(job.d.name)
			}
		}
	}
	m.mu.Lock()
	for i, job := range jobs {
		if errs[i] == nil {
			errs[i] = m.commitLocked(job, outs[i])
		}
		if errs[i] == nil {
			m.totalBytes -= job.heldBytes
			job.heldBytes = 0
		}
	}
	m.mu.Unlock()
	for i, job := range jobs {
		m.endGroupFlush(job, errs[i])
	}
}

// stepsDone tells the core step s is complete for every flush of the
// group still going, under one lock.
func (m *Manager) stepsDone(jobs []*flushJob, errs []error, s core.Step) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, job := range jobs {
		if errs[i] == nil {
			errs[i] = stepErr(job, s, job.f.Done(s))
		}
	}
}

// putGroup writes every segment of the group, with one group of fsyncs
// when the store can (packstore.BatchPutter), else each with one Put, in
// parallel. A flush with rows in a segment that failed takes the
// one-at-a-time path for those rows: segments of its destination alone,
// each with retries, so that a failure the retries cannot cure fails that
// flush (each destination's failure rule), not its neighbours'.
func (m *Manager) putGroup(ctx context.Context, jobs []*flushJob, segs []*segment, outs [][]*segOut, errs []error) {
	var encoded int64
	for _, s := range segs {
		encoded += int64(len(s.data))
	}
	// Encoded segments count against the memory budget while written.
	m.mu.Lock()
	m.totalBytes += encoded
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.totalBytes -= encoded
		m.mu.Unlock()
	}()
	durable := make([]bool, len(segs))
	var items []packstore.PutItem
	var idx []int
	for si, s := range segs {
		if m.putFault != nil {
			if err := m.putFault(s.path, entryDests(s.entries)); err != nil {
				m.log.Warn("segment write failed; writing its destinations apart", "segment", s.path, "destinations", len(s.entries), "error", err)
				continue
			}
		}
		items = append(items, packstore.PutItem{Path: s.path, Data: s.data})
		idx = append(idx, si)
	}
	if bp, ok := m.store.(packstore.BatchPutter); ok && len(items) > 0 {
		for k, err := range bp.PutMany(ctx, items) {
			if durable[idx[k]] = err == nil; err != nil {
				m.log.Warn("segment write failed; writing its destinations apart", "segment", items[k].Path, "error", err)
			}
		}
	} else {
		var wg sync.WaitGroup
		sem := make(chan struct{}, putParallel)
		for k, it := range items {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				err := m.store.Put(ctx, it.Path, it.Data)
				if durable[idx[k]] = err == nil; err != nil {
					m.log.Warn("segment write failed; writing its destinations apart", "segment", it.Path, "error", err)
				}
			}()
		}
		wg.Wait()
	}
	alone := make([][]resolvedPart, len(jobs)) // parts to write one at a time
	for si, s := range segs {
		if !durable[si] && !m.ackUnwritten {
			for _, mb := range s.members {
				if errs[mb.job] == nil {
					alone[mb.job] = append(alone[mb.job], jobs[mb.job].parts[mb.part])
				}
			}
			continue
		}
		o := m.written(s)
		for _, mb := range s.members {
			outs[mb.job] = append(outs[mb.job], o)
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, putParallel)
	for i, job := range jobs {
		if len(alone[i]) == 0 || errs[i] != nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			own, err := m.ownSegments(job.ctx, job, alone[i])
			if err != nil {
				errs[i] = err
				return
			}
			outs[i] = append(outs[i], own...)
		}()
	}
	wg.Wait()
}

// advanceGroup advances the cursor of every flush still going, in one
// statement; a flush the statement could not serve takes the
// one-at-a-time path.
func (m *Manager) advanceGroup(ctx context.Context, jobs []*flushJob, errs []error) {
	mc, ok := m.cursors.(manyCursors)
	slow := make([]bool, len(jobs))
	var advs []state.CursorAdvance
	var idx []int
	m.mu.Lock()
	for i, job := range jobs {
		if errs[i] != nil {
			continue
		}
		d := job.d
		if !ok || m.advanceFault != nil {
			slow[i] = true
			continue
		}
		target, write := d.c.CursorTarget(job.f)
		if !write && needsRegistration(d) {
			// Registered at the zero position (clear.go): no prefix is
			// claimed, but a table-wide clear finds the destination.
			target, write = proto.Position{}, true
		}
		if !write { // not settled (the flush still commits), or nothing to write
			errs[i] = stepErr(job, core.StepCursor, job.f.Done(core.StepCursor))
			continue
		}
		advs = append(advs, state.CursorAdvance{Lease: job.lease, Destination: d.name, Partition: d.part.id, Position: target})
		idx = append(idx, i)
	}
	m.mu.Unlock()
	if len(advs) > 0 {
		res, err := mc.AdvanceMany(ctx, advs)
		if err != nil {
			m.log.Warn("group cursor write failed; advancing one at a time", "cursors", len(advs), "error", err)
			for _, i := range idx {
				slow[i] = true
			}
		} else {
			for k, r := range res {
				i, a := idx[k], advs[k]
				job := jobs[i]
				switch {
				case errors.Is(r.Err, state.ErrLeaseLost):
					m.partitionLost(job.d.part, job.lease)
					errs[i] = fmt.Errorf("advancing cursor %s: %w: %v", a.Destination, ErrPartitionLost, r.Err)
				case r.Err != nil:
					slow[i] = true
				default:
					m.mu.Lock()
					job.d.registered = true
					errs[i] = stepErr(job, core.StepCursor, job.d.c.CursorWritten(job.f, a.Position))
					m.mu.Unlock()
					if m.afterAdvance != nil {
						m.afterAdvance(a.Destination, a.Position)
					}
				}
			}
		}
	}
	for i, job := range jobs {
		if slow[i] && errs[i] == nil {
			errs[i] = m.advance(job.ctx, job)
		}
	}
}

// publishGroup publishes one event per durable segment holding a flush
// still going, asynchronously, and waits for every PubAck; a flush with a
// failed publish republishes its segments' events one by one
// (deduplicated by Nats-Msg-Id).
func (m *Manager) publishGroup(ctx context.Context, jobs []*flushJob, outs [][]*segOut, errs []error) {
	type sent struct {
		members []int
		f       jetstream.PubAckFuture
	}
	var order []*segOut
	members := map[*segOut][]int{}
	for i := range jobs {
		if errs[i] != nil {
			continue
		}
		for _, o := range outs[i] {
			if _, ok := members[o]; !ok {
				order = append(order, o)
			}
			members[o] = append(members[o], i)
		}
	}
	var fs []sent
	slow := make([]bool, len(jobs))
	for _, o := range order {
		ms := members[o]
		msg, err := m.packEvent(jobs[ms[0]].ctx, o)
		if err != nil {
			for _, i := range ms {
				errs[i] = err
			}
			continue
		}
		f, err := m.pub.Publish(ctx, msg)
		if err != nil {
			for _, i := range ms {
				slow[i] = true
			}
			continue
		}
		fs = append(fs, sent{ms, f})
	}
	for _, s := range fs {
		select {
		case <-s.f.Ok():
		case <-s.f.Err():
			for _, i := range s.members {
				slow[i] = true
			}
		}
	}
	for i, job := range jobs {
		if slow[i] && errs[i] == nil {
			errs[i] = m.publishEvents(job.ctx, job, outs[i])
		}
	}
}

// checkLeases asks the state database, right before acking, whether every
// lease of the group (holder and term) is still live by the server clock,
// in one query.
func (m *Manager) checkLeases(ctx context.Context, jobs []*flushJob, errs []error) {
	var held []state.Lease
	for i, job := range jobs {
		if errs[i] != nil {
			continue
		}
		if m.beforeAck != nil {
			m.beforeAck(job.d.name)
		}
		held = append(held, job.lease)
	}
	if len(held) == 0 {
		return
	}
	var live map[state.LeaseKey]bool
	err := retry(ctx, "checking partition leases", func() (err error) {
		live, err = m.leases.HeldMany(ctx, held)
		return err
	})
	for i, job := range jobs {
		if errs[i] != nil {
			continue
		}
		if err != nil {
			errs[i] = err
			continue
		}
		l := job.lease
		if !live[l.Key()] {
			m.partitionLost(job.d.part, l)
			errs[i] = fmt.Errorf("acking flush of %s: %w (term %d)", job.d.name, ErrPartitionLost, l.Term)
		}
	}
}
