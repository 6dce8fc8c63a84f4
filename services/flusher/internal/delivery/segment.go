package delivery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/flusher/internal/resolve"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// Segments: a flush's rows are resolved per (table, schema) on a worker
// (resolvedPart); the committer puts the parts of every flush of a group
// commit that share a table and a schema into ONE segment (a pack of format
// proto.SegmentFormatVersion, grouped by destination, packstore.EncodeSegment).
// The one-at-a-time path (runFlush, and a flush whose batched write
// failed) writes segments holding its one destination.

// resolvedPart is one (table, schema) of a flush, resolved: either planned
// (the surviving rows of its slices, read in place in their message
// batches, gathered into the segment only when the committer encodes it)
// or, when the rows carried values by reference, materialized with those
// values put back (rec).
type resolvedPart struct {
	table, fp string
	schema    *arrow.Schema // of the resolved rows
	rec       arrow.RecordBatch
	spans     []resolve.Span // planned: the slices' rows (their batches retained)
	keep      []resolve.Ref
	rows      int64 // after resolution
}

// input is p as the rows of a segment: its spans and kept rows, or its
// materialized batch whole.
func (p *resolvedPart) input() ([]resolve.Span, []resolve.Ref) {
	if p.rec == nil {
		return p.spans, p.keep
	}
	keep := make([]resolve.Ref, p.rec.NumRows())
	for i := range keep {
		keep[i] = resolve.Ref{Row: int32(i)}
	}
	return []resolve.Span{{Rec: p.rec, Lo: 0, Hi: p.rec.NumRows()}}, keep
}

// segment is one encoded segment, not yet written.
type segment struct {
	meta    packstore.SegmentMeta
	path    string
	data    []byte
	entries []proto.SegmentEntry
	members []segMember // the flushes whose rows it holds
	out     *segOut     // set once durable
}

// segMember is one flush's part in a segment of a group: indices into the
// group's jobs and that job's parts.
type segMember struct{ job, part int }

// segOut is a durable segment as a flush, its status and its PACKS event
// see it. A segment of a group is shared by every flush it holds.
type segOut struct {
	meta    packstore.SegmentMeta
	path    string
	entries []proto.SegmentEntry
	bytes   int64
}

// dests returns the destinations of entries, in row order.
func entryDests(entries []proto.SegmentEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Destination
	}
	return out
}

// newSegmentID names a new segment: the time it is cut, this process's
// writer token and an ordinal unique within the process.
func (m *Manager) newSegmentID() string {
	m.segOnce.Do(func() {
		b := make([]byte, 6)
		_, _ = rand.Read(b) // never fails (crypto/rand)
		m.segWriter = "w" + hex.EncodeToString(b)
	})
	return proto.SegmentID(time.Now(), m.segWriter, m.segN.Add(1))
}

// resolveParts resolves job's batches on the calling worker: one part per
// (table, schema fingerprint, Arrow schema), with the values carried by
// reference inlined (segments never hold a reference, proto.ColClaims). On
// error every part made so far is released.
func (m *Manager) resolveParts(job *flushJob) (parts []resolvedPart, heldBytes int64, err error) {
	if its := job.f.Items; len(its) > 0 && oneSchema(its) {
		// The usual flush: every slice of one table and one schema, one
		// part, no grouping.
		p, held, err := m.resolvePart(job, its[0].table, its[0].fp, its)
		switch {
		case err != nil:
			return nil, 0, err
		case p.rows == 0:
			releaseParts([]resolvedPart{p})
			return nil, held, nil
		}
		return []resolvedPart{p}, held, nil
	}
	type key struct{ table, fp string }
	var order []key
	groups := map[key][]*item{}
	for _, it := range job.f.Items {
		k := key{it.table, it.fp}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], it)
	}
	defer func() {
		if err != nil {
			releaseParts(parts)
			parts, heldBytes = nil, 0
		}
	}()
	for _, k := range order {
		items := groups[k]
		// One fingerprint can still hide batches whose Arrow schemas
		// differ (a producer bug): split them rather than fail.
		for len(items) > 0 {
			same := []*item{items[0]}
			var rest []*item
			for _, it := range items[1:] {
				if sameSchema(it.sc, items[0].sc) {
					same = append(same, it)
				} else {
					rest = append(rest, it)
				}
			}
			items = rest
			p, held, err := m.resolvePart(job, k.table, k.fp, same)
			if err != nil {
				return parts, 0, err
			}
			heldBytes += held
			if p.rows == 0 {
				releaseParts([]resolvedPart{p})
				continue
			}
			parts = append(parts, p)
		}
	}
	return parts, heldBytes, nil
}

// oneSchema reports whether every item has the first's table, fingerprint
// and Arrow schema (interned: compared by identity first).
func oneSchema(its []*item) bool {
	f := its[0]
	for _, it := range its[1:] {
		if it.table != f.table || it.fp != f.fp || !sameSchema(it.sc, f.sc) {
			return false
		}
	}
	return true
}

// resolvePart resolves items (one table, one schema) in place: which of
// their rows survive (resolve.Plan), nothing copied. Rows carrying values
// by reference are gathered at once and the values put back (segments
// never hold a reference), and so are parts of gatherOnWorker rows or
// more. held estimates what the part adds to the
// memory its items hold: its row references, or the materialized batch
// (the items' counted bytes in the proportion of rows kept).
func (m *Manager) resolvePart(job *flushJob, table, fp string, items []*item) (resolvedPart, int64, error) {
	spans := make([]resolve.Span, len(items))
	var bytes int64
	for i, it := range items {
		spans[i] = it.span()
		bytes += it.bytes
	}
	schema := items[0].sc
	keep, st, err := resolve.Plan(schema, spans)
	if err != nil {
		return resolvedPart{}, 0, permanentErr{fmt.Errorf("resolving %s/%s: %w", job.d.name, table, err)}
	}
	if !resolve.HasClaims(schema) && st.Out < gatherOnWorker {
		for _, sp := range spans {
			sp.Rec.Retain()
		}
		p := resolvedPart{table: table, fp: fp, schema: schema, spans: spans, keep: keep, rows: st.Out}
		return p, int64(len(keep)) * int64(unsafe.Sizeof(resolve.Ref{})), nil
	}
	resolved, err := resolve.Gather(m.mem, schema, spans, keep)
	if err != nil {
		return resolvedPart{}, 0, permanentErr{fmt.Errorf("resolving %s/%s: %w", job.d.name, table, err)}
	}
	held := bytes
	if st.In > 0 {
		held = bytes * st.Out / st.In
	}
	if !resolve.HasClaims(schema) {
		return resolvedPart{table: table, fp: fp, schema: schema, rec: resolved, rows: st.Out}, held, nil
	}
	inl, err := m.inlineClaims(job.ctx, resolved)
	resolved.Release()
	if err != nil {
		return resolvedPart{}, 0, fmt.Errorf("writing segment for %s/%s: %w", job.d.name, table, err)
	}
	return resolvedPart{table: table, fp: arrowcodec.Fingerprint(inl.Schema()), schema: inl.Schema(), rec: inl, rows: st.Out}, held, nil
}

// gatherOnWorker is the rows from which a part is gathered on the worker
// that resolves it, in parallel with the other workers, rather than by
// the committer: a large destination's copy stays off the group commit's
// path, as it was before parts were planned; the many small parts of
// many tenants stay planned (gathered once per segment).
const gatherOnWorker = 256

func releaseParts(parts []resolvedPart) {
	for _, p := range parts {
		if p.rec != nil {
			p.rec.Release()
		}
		for _, sp := range p.spans {
			sp.Rec.Release()
		}
	}
}

// segInput is one destination's part in a segment being encoded.
type segInput struct {
	dest string
	part *resolvedPart
}

// encodeSegment encodes one segment of ins (one table, one schema, sorted
// by destination): their rows gathered into one batch (resolve.Gather:
// each message batch read once, however many destinations it feeds), then
// encoded with one footer entry per destination.
func (m *Manager) encodeSegment(table, fp string, schema *arrow.Schema, ins []segInput) (*segment, error) {
	meta := packstore.SegmentMeta{PackID: m.newSegmentID(), StoreID: m.store.ID(), Table: table, Schema: fp}
	var nSpans, nKeep int
	for _, in := range ins {
		if in.part.rec != nil {
			nSpans++
			nKeep += int(in.part.rec.NumRows())
		} else {
			nSpans += len(in.part.spans)
			nKeep += len(in.part.keep)
		}
	}
	spans := make([]resolve.Span, 0, nSpans)
	keep := make([]resolve.Ref, 0, nKeep)
	ranges := make([]packstore.SegmentRange, len(ins))
	for i, in := range ins {
		sp, kp := in.part.input()
		base := int32(len(spans))
		spans = append(spans, sp...)
		for _, r := range kp {
			keep = append(keep, resolve.Ref{Span: base + r.Span, Row: r.Row})
		}
		ranges[i] = packstore.SegmentRange{Destination: in.dest, Rows: int64(len(kp))}
	}
	rec, err := resolve.Gather(m.mem, schema, spans, keep)
	if err != nil {
		return nil, permanentErr{fmt.Errorf("gathering segment of %s: %w", table, err)}
	}
	data, entries, err := packstore.EncodeSegmentBatch(rec, ranges, meta)
	rec.Release()
	if err == nil && m.encodeFault != nil {
		err = m.encodeFault(entryDests(entries))
	}
	if err != nil {
		return nil, permanentErr{fmt.Errorf("encoding segment of %s: %w", table, err)}
	}
	// The footer read back, as the indexer will read it.
	if _, _, err := packstore.ReadPackMeta(data); err != nil {
		return nil, permanentErr{fmt.Errorf("re-reading the footer of segment %s of %s: %w", meta.PackID, table, err)}
	}
	path := meta.Path()
	if path == "" {
		return nil, permanentErr{fmt.Errorf("encoding segment of %s: segment id %q names no path", table, meta.PackID)}
	}
	return &segment{meta: meta, path: path, data: data, entries: entries}, nil
}

// groupSegments encodes the segments of a group commit: one per (table,
// schema fingerprint, Arrow schema) — a new one only past segmentMaxDests
// destinations or m.eventBudget bytes of PACKS event — over
// every flush of jobs still going, encoded in parallel across segments.
// Destinations are taken partition by partition, so that a segment's rows
// come from few message batches (a partition message holds only its
// partition's destinations). A segment that fails to encode is split into
// one-destination segments, so that one destination's bad rows fail its
// own flush (permanently, as an encoding failure is) and not the group's.
func (m *Manager) groupSegments(jobs []*flushJob, errs []error) []*segment {
	type key struct{ table, fp string }
	type group struct {
		key     key
		schema  *arrow.Schema
		members []segMember
		dests   map[string]bool
		event   int // estimated bytes of its PACKS event
	}
	var all []segMember
	for i, job := range jobs {
		if errs[i] != nil {
			continue
		}
		for k := range job.parts {
			all = append(all, segMember{i, k})
		}
	}
	partOf := func(mb segMember) int {
		if p := jobs[mb.job].d.part; p != nil {
			return p.id
		}
		return 0
	}
	sort.SliceStable(all, func(a, b int) bool {
		if pa, pb := partOf(all[a]), partOf(all[b]); pa != pb {
			return pa < pb
		}
		return jobs[all[a].job].d.name < jobs[all[b].job].d.name
	})
	var groups []*group
	byKey := map[key][]*group{}
	for _, mb := range all {
		p := &jobs[mb.job].parts[mb.part]
		kk := key{p.table, p.fp}
		var g *group
		// A segment holds one part per destination (its footer indexes
		// each destination once), so a second flush of a destination in
		// one group (a destination dropped with its partition's lease and
		// claimed again while its old flush still waited for the
		// committer) goes to another segment.
		name := jobs[mb.job].d.name
		cost := len(name) + eventEntryCost
		for _, c := range byKey[kk] {
			if len(c.members) < segmentMaxDests && c.event+cost <= m.eventBudget && !c.dests[name] && sameSchema(c.schema, p.schema) {
				g = c
				break
			}
		}
		if g == nil {
			g = &group{key: kk, schema: p.schema, dests: map[string]bool{}}
			byKey[kk] = append(byKey[kk], g)
			groups = append(groups, g)
		}
		g.dests[name] = true
		g.members = append(g.members, mb)
		g.event += cost
	}
	segs := make([][]*segment, len(groups))
	failed := make([][]error, len(groups)) // per member of a split group
	parallel(len(groups), func(gi int) {
		g := groups[gi]
		sort.Slice(g.members, func(a, b int) bool {
			return jobs[g.members[a].job].d.name < jobs[g.members[b].job].d.name
		})
		ins := make([]segInput, len(g.members))
		for k, mb := range g.members {
			ins[k] = segInput{dest: jobs[mb.job].d.name, part: &jobs[mb.job].parts[mb.part]}
		}
		s, err := m.encodeSegment(g.key.table, g.key.fp, g.schema, ins)
		if err == nil {
			s.members = g.members
			segs[gi] = []*segment{s}
			return
		}
		m.log.Warn("segment encoding failed; encoding its destinations apart", "table", g.key.table, "destinations", len(ins), "error", err)
		failed[gi] = make([]error, len(g.members))
		for k, mb := range g.members {
			one, err := m.encodeSegment(g.key.table, g.key.fp, g.schema, ins[k:k+1])
			if err != nil {
				failed[gi][k] = fmt.Errorf("flushing %s: %w", jobs[mb.job].d.name, err)
				continue
			}
			one.members = []segMember{mb}
			segs[gi] = append(segs[gi], one)
		}
	})
	var out []*segment
	for gi, g := range groups {
		for k, err := range failed[gi] {
			if err != nil && errs[g.members[k].job] == nil {
				errs[g.members[k].job] = err
			}
		}
		out = append(out, segs[gi]...)
	}
	return out
}

// parallel runs f(0..n-1) on up to GOMAXPROCS goroutines.
func parallel(n int, f func(i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

// ownSegments writes parts of job as segments holding job's destination
// alone, each with retries: the one-at-a-time path.
func (m *Manager) ownSegments(ctx context.Context, job *flushJob, parts []resolvedPart) ([]*segOut, error) {
	out := make([]*segOut, 0, len(parts))
	for i := range parts {
		p := &parts[i]
		s, err := m.encodeSegment(p.table, p.fp, p.schema, []segInput{{dest: job.d.name, part: p}})
		if err != nil {
			return nil, fmt.Errorf("flushing %s: %w", job.d.name, err)
		}
		dests := []string{job.d.name}
		err = retry(ctx, "writing segment "+s.path, func() error {
			if m.putFault != nil {
				if err := m.putFault(s.path, dests); err != nil {
					return err
				}
			}
			return m.store.Put(ctx, s.path, s.data)
		})
		if err != nil {
			if errors.Is(err, packstore.ErrBadPath) {
				err = permanentErr{err}
			}
			return nil, err
		}
		out = append(out, m.written(s))
	}
	return out, nil
}

// written records a durable segment and drops its bytes.
func (m *Manager) written(s *segment) *segOut {
	var rows int64
	for _, e := range s.entries {
		rows += e.Rows
	}
	m.m.filesWritten.Inc()
	m.m.packBytes.Observe(float64(len(s.data)))
	m.m.packRows.Observe(float64(rows))
	m.m.segmentDests.Observe(float64(len(s.entries)))
	s.out = &segOut{meta: s.meta, path: s.path, entries: s.entries, bytes: int64(len(s.data))}
	s.data = nil
	return s.out
}

// sameSchema is a.Equal(b), answered by identity first: the slices of one
// message share its schema, and at 10,000 destinations the field-by-field
// comparison (metadata included) was 4% of the process's CPU.
func sameSchema(a, b *arrow.Schema) bool { return a == b || a.Equal(b) }
