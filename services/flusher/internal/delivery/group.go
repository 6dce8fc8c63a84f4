package delivery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/state"
)

// Group commit: workers resolve and encode (CPU); one committer takes every
// encoded flush waiting (up to commitBatchMax) and makes the batch durable
// and visible with shared round trips, in the same order as a single flush:
//
//  1. every pack written, with one group of fsyncs (packstore.BatchPutter);
//  2. every cursor advanced in one fenced, monotonic statement
//     (state.Cursors.AdvanceMany);
//  3. every pack event published asynchronously, all PubAcks awaited;
//  4. every lease of the batch checked live in one query, right before
//  5. acking.
//
// A flush whose batched step fails falls back to the one-at-a-time step
// (with its retries), so failure handling is exactly runFlush's. A flush is
// still serial per destination: it stays in flight until committed.
const (
	commitBatchMax = 512  // flushes per group commit
	commitQueue    = 1024 // encoded flushes waiting for the committer
	putParallel    = 16   // concurrent one-at-a-time pack writes (fallback, non-batch stores)
)

// manyCursors is the batch cursor write of state.Cursors.
type manyCursors interface {
	AdvanceMany(ctx context.Context, advs []state.CursorAdvance) ([]state.AdvanceResult, error)
}

// prepareFlush encodes job on the calling worker and hands it to the
// committer; a failure to encode fails the flush here.
func (m *Manager) prepareFlush(ctx context.Context, job *flushJob) {
	m.beginFlush(ctx, job)
	packs, err := m.encodePacks(job)
	if err != nil {
		m.endFlush(job, err)
		return
	}
	job.encoded = packs
	// Encoded packs waiting for the committer count against the memory
	// budget until the flush ends (so the watermark and backpressure see
	// them).
	for _, e := range packs {
		job.encodedBytes += int64(len(e.data))
	}
	m.mu.Lock()
	m.totalBytes += job.encodedBytes
	m.mu.Unlock()
	select {
	case m.commitQ <- job:
	case <-ctx.Done():
		m.endGroupFlush(job, fmt.Errorf("queueing flush of %s: %w", job.d.name, ctx.Err()))
	}
}

// endGroupFlush ends a flush that went through prepareFlush.
func (m *Manager) endGroupFlush(job *flushJob, err error) {
	m.mu.Lock()
	m.totalBytes -= job.encodedBytes
	m.mu.Unlock()
	job.encoded, job.encodedBytes = nil, 0
	m.endFlush(job, err)
}

// committer runs group commits until commitQ is closed (after the workers
// stopped), so every queued flush ends either committed or failed.
func (m *Manager) committer(ctx context.Context) {
	for job := range m.commitQ {
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
	outs := make([][]packOut, len(jobs))
	t0 := time.Now()
	m.putGroup(ctx, jobs, outs, errs)
	m.stepsDone(jobs, errs, core.StepWrite)
	t1 := time.Now()
	m.advanceGroup(ctx, jobs, errs)
	t2 := time.Now()
	m.publishGroup(ctx, jobs, outs, errs)
	m.stepsDone(jobs, errs, core.StepPublish)
	t3 := time.Now()
	if !m.noAckFence {
		m.checkLeases(ctx, jobs, errs)
	}
	t4 := time.Now()
	defer func() {
		m.log.Debug("group commit", "flushes", len(jobs), "put", t1.Sub(t0), "cursors", t2.Sub(t1), "publish", t3.Sub(t2), "leases", t4.Sub(t3), "ack", time.Since(t4))
	}()
	for i, job := range jobs {
		if errs[i] == nil {
			errs[i] = m.commit(job, outs[i])
		}
		m.endGroupFlush(job, errs[i])
	}
}

// stepsDone tells the core step s is complete for every flush of the
// group still going.
func (m *Manager) stepsDone(jobs []*flushJob, errs []error, s core.Step) {
	for i, job := range jobs {
		if errs[i] == nil {
			errs[i] = m.stepDone(job, s)
		}
	}
}

// putGroup writes every pack of the group.
func (m *Manager) putGroup(ctx context.Context, jobs []*flushJob, outs [][]packOut, errs []error) {
	slow := make([]bool, len(jobs))
	bp, batched := m.store.(packstore.BatchPutter)
	var items []packstore.PutItem
	var owner []int
	for i, job := range jobs {
		if !batched {
			slow[i] = true
			continue
		}
		for _, e := range job.encoded {
			if m.putFault != nil {
				if err := m.putFault(e.meta.Path()); err != nil {
					slow[i] = true // the one-at-a-time path retries it
					break
				}
			}
		}
		if slow[i] {
			continue
		}
		for _, e := range job.encoded {
			items = append(items, packstore.PutItem{Path: e.meta.Path(), Data: e.data})
			owner = append(owner, i)
		}
	}
	if len(items) > 0 {
		for k, err := range bp.PutMany(ctx, items) {
			if err != nil {
				slow[owner[k]] = true
			}
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, putParallel)
	for i, job := range jobs {
		if !slow[i] {
			outs[i] = make([]packOut, 0, len(job.encoded))
			for _, e := range job.encoded {
				outs[i] = append(outs[i], m.written(e))
			}
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			outs[i], errs[i] = m.putPacks(job.ctx, job, job.encoded)
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

// publishGroup publishes every pack event of the group asynchronously and
// waits for every PubAck; a flush with a failed publish retries its events
// one by one (deduplicated by Nats-Msg-Id).
func (m *Manager) publishGroup(ctx context.Context, jobs []*flushJob, outs [][]packOut, errs []error) {
	type sent struct {
		i int
		f jetstream.PubAckFuture
	}
	var fs []sent
	slow := make([]bool, len(jobs))
	for i, job := range jobs {
		if errs[i] != nil {
			continue
		}
		for _, po := range outs[i] {
			msg, err := m.packEvent(job.ctx, po)
			if err != nil {
				errs[i] = err
				break
			}
			f, err := m.pub.Publish(ctx, msg)
			if err != nil {
				slow[i] = true
				break
			}
			fs = append(fs, sent{i, f})
		}
	}
	for _, s := range fs {
		select {
		case <-s.f.Ok():
		case <-s.f.Err():
			slow[s.i] = true
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
	type key struct {
		name, holder string
		term         int64
	}
	if m.pool == nil {
		for i, job := range jobs {
			if errs[i] == nil {
				errs[i] = m.checkLease(job.ctx, job)
			}
		}
		return
	}
	var names, holders []string
	var terms []int64
	seen := map[key]bool{}
	for i, job := range jobs {
		if errs[i] != nil {
			continue
		}
		if m.beforeAck != nil {
			m.beforeAck(job.d.name)
		}
		l := job.lease
		k := key{l.Name, l.Holder, l.Term}
		if !seen[k] {
			seen[k] = true
			names, holders, terms = append(names, l.Name), append(holders, l.Holder), append(terms, l.Term)
		}
	}
	if len(names) == 0 {
		return
	}
	live := map[key]bool{}
	err := retry(ctx, "checking partition leases", func() error {
		clear(live)
		rows, err := m.pool.Query(ctx, m.qLeasesLive, names, holders, terms)
		if err != nil {
			return err
		}
		var k key
		_, err = pgx.ForEachRow(rows, []any{&k.name, &k.holder, &k.term}, func() error {
			live[k] = true
			return nil
		})
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
		if !live[key{l.Name, l.Holder, l.Term}] {
			m.partitionLost(job.d.part, l)
			errs[i] = fmt.Errorf("acking flush of %s: %w (term %d)", job.d.name, ErrPartitionLost, l.Term)
		}
	}
}
