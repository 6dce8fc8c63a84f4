package delivery

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
	"github.com/sluice-cdc/sluice/shared/state"
)

// segmentFiles lists the segments in the store.
func (e *env) segmentFiles(t testing.TB) []string {
	var out []string
	if err := e.store.List(e.ctx, proto.SegmentsDir+"/", func(path string) error {
		out = append(out, path)
		return nil
	}); err != nil {
		t.Fatalf("listing segments: %v", err)
	}
	return out
}

// packEvents reads every event on PACKS.
func (e *env) packEvents(t testing.TB) []jetstream.Msg {
	t.Helper()
	st, err := e.js.Stream(e.ctx, proto.StreamPacks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := e.js.OrderedConsumer(e.ctx, proto.StreamPacks, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for uint64(len(out)) < info.State.Msgs {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("reading pack events: %v", err)
		}
		out = append(out, msg)
	}
	return out
}

// holdGroup makes the committer wait, after it took the first flush of a
// group, until release is called; groupDests calls it once n flushes are
// waiting in all: the committer then takes them as one group commit.
type groupGate struct {
	n       int
	open    chan struct{}
	release func()
}

func holdGroup(t testing.TB, m *Manager, n int) *groupGate {
	g := &groupGate{n: n, open: make(chan struct{})}
	var once, first sync.Once
	g.release = func() { once.Do(func() { close(g.open) }) }
	t.Cleanup(g.release)
	m.beforeGroup = func() { first.Do(func() { <-g.open }) }
	return g
}

// groupDests publishes one message for each of n destinations (one
// partition, one table) and flushes them in one group commit.
func groupDests(t *testing.T, e *env, r *running, g *groupGate) []string {
	t.Helper()
	n := g.n
	dests := make([]string, n)
	for i := range dests {
		dests[i] = fmt.Sprintf("g%03d", i)
		e.publish(t, dests[i], []pt.Row{{ID: int64(i), LSN: uint64(100 + i), Seq: 1}, {ID: int64(i) + 1000, LSN: uint64(100 + i), Seq: 2, Op: proto.OpDelete}})
	}
	waitFor(t, 10*time.Second, "every message buffered", func() bool { return r.m.Status().BufferedRows == int64(2*n) })
	r.m.mu.Lock()
	for _, d := range dests {
		r.m.enqueueLocked(r.m.dests[d], "test")
	}
	r.m.mu.Unlock()
	// The committer holds the first; the others wait behind it.
	waitFor(t, 20*time.Second, "every flush resolved", func() bool { return len(r.m.commitQ) == n-1 })
	g.release()
	return dests
}

// A group commit of N destinations of one table writes exactly one file
// and publishes exactly one PACKS event (one row per destination); every
// cursor advances, and only once the segment is durable; every message is
// acked; each destination's last_pack names the segment.
func TestGroupCommitWritesOneSegment(t *testing.T) {
	const n = 40
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.Partitions = 1 })
	var v violations
	var advMu sync.Mutex
	advanced := map[string]bool{}
	var g *groupGate
	r := e.start(t, "a", func(m *Manager) {
		g = holdGroup(t, m, n)
		hook := v.hook(t, e)
		m.afterAdvance = func(d string, pos proto.Position) {
			hook(d, pos) // the cursor's changes are in a durable file
			advMu.Lock()
			advanced[d] = true
			advMu.Unlock()
		}
	})
	dests := groupDests(t, e, r, g)
	waitFor(t, 20*time.Second, "every flush committed", func() bool { return testutilValue(r.m, "ok") == n })
	if errs := v.get(); len(errs) > 0 {
		t.Fatalf("a cursor passed a change in no durable file: %v", errs)
	}
	files := e.segmentFiles(t)
	if len(files) != 1 {
		t.Fatalf("%d files written for one group of %d destinations of one table, want 1: %v", len(files), n, files[:min(len(files), 3)])
	}
	if got := testutil.ToFloat64(r.m.m.filesWritten); got != 1 {
		t.Fatalf("files written counter %v, want 1", got)
	}
	data, err := e.store.Get(e.ctx, files[0])
	if err != nil {
		t.Fatal(err)
	}
	meta, recs, err := packstore.DecodePack(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		r.Release()
	}
	entries, err := meta.Entries()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != n || !sort.SliceIsSorted(entries, func(i, j int) bool { return entries[i].Destination < entries[j].Destination }) {
		t.Fatalf("segment holds %d destinations (want %d, sorted): %+v", len(entries), n, entries)
	}
	for _, en := range entries {
		if en.Rows != 2 || en.Tombstones != 1 {
			t.Fatalf("entry %+v, want 2 rows, 1 tombstone", en)
		}
	}
	evs := e.packEvents(t)
	if len(evs) != 1 {
		t.Fatalf("%d PACKS events, want 1", len(evs))
	}
	ev := evs[0]
	if ev.Subject() != proto.SegmentEventSubject("public.items") || ev.Headers().Get(proto.HeaderMsgID) != proto.PackMsgID(meta.PackID) {
		t.Fatalf("event subject %s, msg id %s (segment %s)", ev.Subject(), ev.Headers().Get(proto.HeaderMsgID), meta.PackID)
	}
	rec, err := arrowcodec.Decode(ev.Data(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if rec.NumRows() != n {
		t.Fatalf("event has %d rows, want %d", rec.NumRows(), n)
	}
	evDest := rec.Column(2).(*array.String)
	evPath := rec.Column(4).(*array.String)
	for i := 0; i < n; i++ {
		if evDest.Value(i) != entries[i].Destination || evPath.Value(i) != files[0] || rec.Column(0).(*array.String).Value(i) != meta.PackID {
			t.Fatalf("event row %d: %s %s, want %s %s", i, evDest.Value(i), evPath.Value(i), entries[i].Destination, files[0])
		}
	}
	st := r.m.Status()
	for _, ds := range st.Destinations {
		if ds.LastPack != meta.PackID {
			t.Fatalf("%s last_pack %q, want the segment %q", ds.Destination, ds.LastPack, meta.PackID)
		}
	}
	for i, d := range dests {
		if c := e.cursor(t, d); c != (proto.Position{LSN: proto.LSN(100 + i), Seq: 2}) || !advanced[d] {
			t.Fatalf("cursor of %s at %s", d, c)
		}
	}
	waitFor(t, 5*time.Second, "every message acked", func() bool { p, _ := e.ackPending(t, 0); return p == 0 })
}

// segmentFailScenario: one group of n destinations whose every file write
// fails (the batched write and each destination's one-at-a-time retries).
// It returns the violations: a message acked, a cursor moved, or a flush
// counted ok while no file holds the rows.
func segmentFailScenario(t *testing.T, ackUnwritten bool) []error {
	const n = 6
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.Partitions = 1 })
	var mu sync.Mutex
	var puts int
	var g *groupGate
	r := e.start(t, "a", func(m *Manager) {
		g = holdGroup(t, m, n)
		m.ackUnwritten = ackUnwritten
		// A fake store fault: the directory store cannot be made to fail
		// on demand. Every write fails, so no file is ever durable.
		m.putFault = func(string, []string) error {
			mu.Lock()
			puts++
			mu.Unlock()
			return errors.New("injected segment write failure")
		}
	})
	groupDests(t, e, r, g)
	waitFor(t, 30*time.Second, "every flush ended", func() bool {
		return testutilValue(r.m, "failed")+testutilValue(r.m, "ok") >= n
	})
	var errs []error
	if files := e.segmentFiles(t); len(files) > 0 {
		t.Fatalf("files written despite the fault: %v", files)
	}
	if ok := testutilValue(r.m, "ok"); ok > 0 {
		errs = append(errs, fmt.Errorf("%v flushes committed with no durable file", ok))
	}
	c, err := e.js.Consumer(e.ctx, proto.StreamRouted, proto.ConsumerFlusher(0))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream > 0 {
		errs = append(errs, fmt.Errorf("messages acked through stream seq %d with no durable file", info.AckFloor.Stream))
	}
	r.m.mu.Lock()
	for name, d := range r.m.dests {
		if !d.c.Cursor().IsZero() {
			errs = append(errs, fmt.Errorf("cursor of %s at %s with no durable file", name, d.c.Cursor()))
		}
	}
	r.m.mu.Unlock()
	if !ackUnwritten {
		mu.Lock()
		// One batched write, then per destination five attempts alone.
		if puts < 1+n*maxAttempts {
			t.Errorf("%d write attempts, want at least %d", puts, 1+n*maxAttempts)
		}
		mu.Unlock()
	}
	return errs
}

// A failed segment write fails every flush in it: no ack, no cursor, no
// committed flush.
func TestSegmentWriteFailureFailsEveryFlush(t *testing.T) {
	if errs := segmentFailScenario(t, false); len(errs) > 0 {
		t.Fatalf("a failed segment write was acked: %v", errs)
	}
}

// Negative control: counting a failed segment write as durable acks every
// message of the group with its rows in no file.
func TestSegmentWriteFailureNegativeControl(t *testing.T) {
	if errs := segmentFailScenario(t, true); len(errs) == 0 {
		t.Fatal("negative control: acking an unwritten segment went unnoticed")
	}
}

// A destination whose rows cannot be written fails alone: the group's
// segment fails, its destinations are written apart, every other one
// commits (and the bad one's rows are in no file).
func TestSegmentWriteFailureOfOneDestination(t *testing.T) {
	const n = 8
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.Partitions = 1 })
	var g *groupGate
	r := e.start(t, "a", func(m *Manager) {
		g = holdGroup(t, m, n)
		m.putFault = func(_ string, dests []string) error {
			if slices.Contains(dests, "g003") {
				return fmt.Errorf("injected: %w", packstore.ErrBadPath)
			}
			return nil
		}
	})
	groupDests(t, e, r, g)
	waitFor(t, 20*time.Second, "flushes ended", func() bool {
		return testutilValue(r.m, "ok") == n-1 && testutilValue(r.m, "failed") >= 1
	})
	if files := e.segmentFiles(t); len(files) != n-1 {
		t.Fatalf("%d files, want %d one-destination segments (the group's failed)", len(files), n-1)
	}
	if len(e.packed(t, "g003")) != 0 || !e.cursor(t, "g003").IsZero() {
		t.Fatal("the failed destination's rows or cursor landed")
	}
	if len(e.packed(t, "g004")) != 2 || e.cursor(t, "g004").IsZero() {
		t.Fatal("a healthy destination of the group did not commit")
	}
}

// plainStore is the directory store without its batch write
// (packstore.BatchPutter), as the S3 store is.
type plainStore struct{ packstore.Store }

// On a store without batch writes (S3) the group still writes one file
// per table, each with one Put.
func TestGroupCommitOneSegmentWithoutBatchPut(t *testing.T) {
	const n = 12
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.Partitions = 1 })
	var g *groupGate
	r := e.start(t, "a", func(m *Manager) {
		g = holdGroup(t, m, n)
		m.store = plainStore{m.store}
	})
	if _, ok := r.m.store.(packstore.BatchPutter); ok {
		t.Fatal("the plain store still batches")
	}
	dests := groupDests(t, e, r, g)
	waitFor(t, 20*time.Second, "every flush committed", func() bool { return testutilValue(r.m, "ok") == n })
	if files := e.segmentFiles(t); len(files) != 1 {
		t.Fatalf("%d files for one group of one table, want 1", len(files))
	}
	for _, d := range dests {
		if len(e.packed(t, d)) != 2 {
			t.Fatalf("%s's rows are not in the segment", d)
		}
	}
}

// A segment that fails to encode is encoded one destination at a time:
// only the destination whose rows fail halts (an encoding failure is
// permanent), the others commit in segments of their own.
func TestSegmentEncodeFailureOfOneDestination(t *testing.T) {
	const n = 6
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.Partitions = 1 })
	var g *groupGate
	r := e.start(t, "a", func(m *Manager) {
		g = holdGroup(t, m, n)
		// A fake encoder fault: rows EncodeSegment refuses are refused
		// earlier (receive, resolve), so the real encoder cannot be made
		// to fail on demand.
		m.encodeFault = func(dests []string) error {
			if slices.Contains(dests, "g002") {
				return errors.New("injected encoding failure")
			}
			return nil
		}
	})
	groupDests(t, e, r, g)
	waitFor(t, 20*time.Second, "flushes ended", func() bool {
		return testutilValue(r.m, "ok") == n-1 && testutilValue(r.m, "failed") == 1
	})
	if files := e.segmentFiles(t); len(files) != n-1 {
		t.Fatalf("%d files, want %d one-destination segments", len(files), n-1)
	}
	st := r.m.Status()
	for _, ds := range st.Destinations {
		if halted := ds.State == StateHalted; halted != (ds.Destination == "g002") {
			t.Fatalf("%s: state %s", ds.Destination, ds.State)
		}
	}
	if len(e.packed(t, "g002")) != 0 || !e.cursor(t, "g002").IsZero() || e.cursor(t, "g005").IsZero() {
		t.Fatal("the failed destination landed, or a healthy one did not")
	}
}

// Two flushes of one destination in one group commit (the destination was
// dropped with its partition's lease and claimed again while its old flush
// still waited for the committer) go to two segments: a segment's footer
// indexes each destination once, and one segment holding both failed to
// encode, sending the whole group down the one-destination path.
func TestGroupSegmentsOnePartPerDestination(t *testing.T) {
	e := newEnv(t, nil)
	m, err := New(e.cfg, Deps{JS: e.js, Store: e.store,
		Cursors: state.NewCursors(e.pool, e.cfg.State.Schema), Leases: state.NewLeases(e.pool, e.cfg.State.Schema),
		Metrics: prometheus.NewRegistry(), ID: "seg-dup"})
	if err != nil {
		t.Fatal(err)
	}
	job := func(name string, id int64) *flushJob {
		rec := pt.Batch(memory.DefaultAllocator, []pt.Row{{ID: id, LSN: uint64(100 + id), Seq: 1}})
		t.Cleanup(rec.Release)
		return &flushJob{d: &dest{name: name}, parts: []resolvedPart{{table: "public.t", fp: "fp", schema: rec.Schema(), rec: rec, rows: 1}}}
	}
	jobs := []*flushJob{job("a", 1), job("b", 2), job("a", 3)}
	errs := make([]error, len(jobs))
	segs := m.groupSegments(jobs, errs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("flush %d failed: %v", i, err)
		}
	}
	if len(segs) != 2 {
		t.Fatalf("%d segments, want 2 (a and b in one, the second a in another)", len(segs))
	}
	for _, s := range segs {
		seen := map[string]bool{}
		for _, en := range s.entries {
			if seen[en.Destination] {
				t.Fatalf("segment %s holds destination %s twice", s.meta.PackID, en.Destination)
			}
			seen[en.Destination] = true
		}
	}
}
