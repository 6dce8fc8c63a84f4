package delivery

import (
	"context"
	"fmt"

	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/state"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type env struct {
	t     testing.TB
	cfg   config.Config
	ns    *server.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	pool  *pgxpool.Pool
	store *packstore.DirStore
	ctx   context.Context

	mu   sync.Mutex
	sent map[string][]sentRow // destination -> every change published
	// header, if set, is added to every message publishParts sends.
	header nats.Header
}

func newEnv(t testing.TB, mod func(*config.Config)) *env {
	t.Helper()
	cfg := config.Default()
	cfg.Delivery.Partitions = 2
	cfg.Delivery.FlushInterval = time.Hour
	cfg.Delivery.Workers = 4
	cfg.Delivery.LeaseTTL = 2 * time.Second
	cfg.Delivery.DrainTimeout = 10 * time.Second
	cfg.NATS.MaxBytes = 1 << 30
	if mod != nil {
		mod(&cfg)
	}
	ns, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir(), MaxPayload: int32(cfg.NATS.MaxPayload)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	ctx := context.Background()
	nc, js := connect(t, ns)
	if err := natsx.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	dsn := pgtest.NewDB(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := state.Migrate(ctx, pool, cfg.State.Schema); err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, cfg: cfg, ns: ns, nc: nc, js: js, pool: pool, store: store, ctx: ctx, sent: map[string][]sentRow{}}
}

func connect(t testing.TB, ns *server.Server) (*nats.Conn, jetstream.JetStream) {
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

type running struct {
	m    *Manager
	stop func()
	err  chan error
	nc   *nats.Conn
}

// start runs a Manager on its own NATS connection.
func (e *env) start(t testing.TB, id string, knobs func(*Manager)) *running {
	t.Helper()
	nc, js := connect(t, e.ns)
	m, err := New(e.cfg, Deps{JS: js, Store: e.store,
		Cursors: state.NewCursors(e.pool, e.cfg.State.Schema), Leases: state.NewLeases(e.pool, e.cfg.State.Schema),
		Metrics: prometheus.NewRegistry(), ID: id})
	if err != nil {
		t.Fatal(err)
	}
	// The tests here drive flushes by size and interval: a new
	// destination's first buffer waits too, unless a test turns
	// firstFlushLocked's rule back on (TestNewDestinationFlushesAtOnce).
	m.noFirstFlush = true
	if knobs != nil {
		knobs(m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{m: m, err: make(chan error, 1), nc: nc}
	go func() { r.err <- m.Run(ctx) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-r.err; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(r.stop)
	return r
}

var idSeq int

// publish sends one ROUTED partition message holding rows of dest, as the
// router would.
func (e *env) publish(t testing.TB, dest string, rows []pt.Row) {
	t.Helper()
	e.publishParts(t, destRows{dest, rows})
}

// destRows are one destination's rows of a partition message.
type destRows struct {
	dest string
	rows []pt.Row
}

// publishParts sends one ROUTED partition message holding the rows of
// every destination in parts (one partition), grouped by destination in
// the order given, and returns its msg id.
func (e *env) publishParts(t testing.TB, parts ...destRows) string {
	t.Helper()
	var all []pt.Row
	var dests []string
	part := proto.Partition(parts[0].dest, e.cfg.Delivery.Partitions)
	for _, p := range parts {
		if q := proto.Partition(p.dest, e.cfg.Delivery.Partitions); q != part {
			t.Fatalf("destinations %s and %s are in different partitions", parts[0].dest, p.dest)
		}
		for _, r := range p.rows {
			if r.Tenant == "" {
				r.Tenant = p.dest
			}
			if r.Op == 0 {
				r.Op = proto.OpInsert
			}
			all = append(all, r)
			dests = append(dests, p.dest)
		}
	}
	rec := pt.Batch(nil, all)
	defer rec.Release()
	fp := arrowcodec.Fingerprint(rec.Schema())
	withDest := addDestinations(rec, dests)
	defer withDest.Release()
	body, err := arrowcodec.Encode(withDest)
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	idSeq++
	id := "test:" + strconv.Itoa(idSeq)
	for i, r := range all {
		e.sent[dests[i]] = append(e.sent[dests[i]], sentRow{r.ID, proto.Position{LSN: proto.LSN(r.LSN), Seq: r.Seq}})
	}
	e.mu.Unlock()
	h := nats.Header{}
	h.Set(proto.HeaderWire, proto.WireVersion)
	h.Set(proto.HeaderTable, "public.items")
	h.Set(proto.HeaderSchema, fp) // of the rows without the destination column
	h.Set(proto.HeaderMsgID, proto.PartitionMsgID(id, part))
	for k, v := range e.header {
		h[k] = v
	}
	msg := &nats.Msg{Subject: proto.RoutedPartitionSubject(part), Header: h, Data: body}
	if _, err := e.js.PublishMsg(e.ctx, msg); err != nil {
		t.Fatal(err)
	}
	return id
}

// addDestinations is rec with a last column proto.ColDestination (utf8)
// naming each row's destination.
func addDestinations(rec arrow.RecordBatch, dests []string) arrow.RecordBatch {
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(dests, nil)
	col := b.NewArray()
	defer col.Release()
	sc := rec.Schema()
	md := sc.Metadata()
	fields := append(slices.Clone(sc.Fields()), arrow.Field{Name: proto.ColDestination, Type: arrow.BinaryTypes.String})
	cols := append(slices.Clone(rec.Columns()), col)
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
}

// publishLegacy sends one per-destination ROUTED message for dest (the
// wire before partition messages: subject sluice.routed.<p>.<dest>, no
// destination column), as a stream written before the upgrade holds.
func (e *env) publishLegacy(t testing.TB, dest string, rows []pt.Row) {
	t.Helper()
	for i := range rows {
		if rows[i].Tenant == "" {
			rows[i].Tenant = dest
		}
		if rows[i].Op == 0 {
			rows[i].Op = proto.OpInsert
		}
	}
	rec := pt.Batch(nil, rows)
	defer rec.Release()
	body, err := arrowcodec.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	idSeq++
	id := idSeq
	for _, r := range rows {
		e.sent[dest] = append(e.sent[dest], sentRow{r.ID, proto.Position{LSN: proto.LSN(r.LSN), Seq: r.Seq}})
	}
	e.mu.Unlock()
	h := nats.Header{}
	h.Set(proto.HeaderWire, proto.WireVersion)
	h.Set(proto.HeaderTable, "public.items")
	h.Set(proto.HeaderSchema, arrowcodec.Fingerprint(rec.Schema()))
	h.Set(proto.HeaderDestination, dest)
	h.Set(proto.HeaderMsgID, "test:"+strconv.Itoa(id))
	msg := &nats.Msg{Subject: proto.RoutedSubject(proto.Partition(dest, e.cfg.Delivery.Partitions), dest), Header: h, Data: body}
	if _, err := e.js.PublishMsg(e.ctx, msg); err != nil {
		t.Fatal(err)
	}
}

type sentRow struct {
	key int64
	pos proto.Position
}

// packed returns, per key of dest, the newest position found in the pack
// store: dest's rows of every segment, and of any per-destination pack.
func (e *env) packed(t testing.TB, dest string) map[int64]proto.Position {
	out := map[int64]proto.Position{}
	for _, prefix := range []string{proto.SegmentsDir + "/", dest + "/"} {
		err := e.store.List(e.ctx, prefix, func(path string) error {
			b, err := e.store.Get(e.ctx, path)
			if err != nil {
				return err
			}
			_, recs, err := packstore.DecodePack(b, nil)
			if err != nil {
				return err
			}
			for _, r := range recs {
				addRows(out, r, dest)
				r.Release()
			}
			return nil
		})
		if err != nil {
			t.Errorf("listing %s: %v", prefix, err)
		}
	}
	return out
}

// addRows records in out, per key, the newest position of r's rows of dest
// (every row when r has no proto.ColDestination).
func addRows(out map[int64]proto.Position, r arrow.RecordBatch, dest string) {
	ids := r.Column(0).(*array.Int64)
	lsn := r.Column(r.Schema().FieldIndices(proto.ColLSN)[0]).(*array.Uint64)
	seq := r.Column(r.Schema().FieldIndices(proto.ColSeq)[0]).(*array.Uint64)
	var dcol *array.String
	if idx := r.Schema().FieldIndices(proto.ColDestination); len(idx) == 1 {
		dcol, _ = r.Column(idx[0]).(*array.String)
	}
	for i := 0; i < int(r.NumRows()); i++ {
		if dcol != nil && dcol.Value(i) != dest {
			continue
		}
		p := proto.Position{LSN: proto.LSN(lsn.Value(i)), Seq: seq.Value(i)}
		if q, ok := out[ids.Value(i)]; !ok || q.Less(p) {
			out[ids.Value(i)] = p
		}
	}
}

// checkCursor reports a violation if cursor passes a sent change of dest
// that is in no pack (the prefix-complete promise).
func (e *env) checkCursor(t testing.TB, dest string, cursor proto.Position) error {
	packed := e.packed(t, dest)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.sent[dest] {
		if !cursor.Less(r.pos) && !covered(packed, r) {
			return fmt.Errorf("cursor of %s at %s passes %s (key %d), which is in no pack", dest, cursor, r.pos, r.key)
		}
	}
	return nil
}

// allPacked reports whether every sent change is in a pack.
func (e *env) allPacked(t testing.TB) bool {
	e.mu.Lock()
	dests := make([]string, 0, len(e.sent))
	for d := range e.sent {
		dests = append(dests, d)
	}
	e.mu.Unlock()
	sort.Strings(dests)
	for _, d := range dests {
		packed := e.packed(t, d)
		e.mu.Lock()
		ps := e.sent[d]
		e.mu.Unlock()
		for _, r := range ps {
			if !covered(packed, r) {
				return false
			}
		}
	}
	return true
}

func (e *env) cursor(t testing.TB, dest string) proto.Position {
	p, _, err := state.NewCursors(e.pool, e.cfg.State.Schema).Get(e.ctx, dest)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) ackPending(t testing.TB, part int) (pending int, redelivered int) {
	c, err := e.js.Consumer(e.ctx, proto.StreamRouted, proto.ConsumerFlusher(part))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.NumAckPending, info.NumRedelivered
}

// waitFor retries cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// destIn returns a destination name that hashes into partition p.
func destIn(p, partitions int, prefix string) string {
	for i := 0; ; i++ {
		d := prefix + strconv.Itoa(i)
		if proto.Partition(d, partitions) == p {
			return d
		}
	}
}

func testutilValue(m *Manager, result string) float64 {
	return testutil.ToFloat64(m.m.flushes.WithLabelValues(result))
}

func mustEncode(t testing.TB, rec arrowRecord) []byte {
	t.Helper()
	b, err := arrowcodec.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type arrowRecord = arrow.RecordBatch

// covered: the change is in a pack, or a newer version of its key is.
func covered(packed map[int64]proto.Position, r sentRow) bool {
	p, ok := packed[r.key]
	return ok && !p.Less(r.pos)
}
