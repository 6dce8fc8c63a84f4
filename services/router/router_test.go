package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/router/internal/route"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsotel"
	"github.com/sluice-cdc/sluice/shared/natsx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	srv *server.Server
	cfg config.Config
	nc  *nats.Conn
	js  jetstream.JetStream
}

// startEnv runs a real embedded JetStream server (random port, temp store)
// with the sluice streams.
func startEnv(t *testing.T) *env {
	t.Helper()
	cfg := config.Default()
	cfg.NATS.MaxPayload = 1 << 20
	cfg.NATS.MaxBytes = 256 << 20
	cfg.Delivery.Partitions = 4
	s, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir(), MaxPayload: int32(cfg.NATS.MaxPayload)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	e := &env{srv: s, cfg: cfg}
	e.nc, e.js = e.connect(t, "test")
	if err := natsx.EnsureStreams(t.Context(), e.js, cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) connect(t *testing.T, name string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, js, err := natsx.Connect(ctx, e.cfg.NATS, e.srv.ClientURL(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, js
}

// eventually retries cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// row is one change of the test table public.orders (tenant text).
type row struct {
	tenant *string // nil: NULL
	id     int64
	op     int8
	lsn    uint64
	seq    uint64
	note   string
}

var schema = arrow.NewSchema([]arrow.Field{
	{Name: "tenant", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: arrow.NewMetadata([]string{proto.MetaKind, proto.MetaPgType}, []string{"text", "text"})},
	{Name: "id", Type: arrow.PrimitiveTypes.Int64, Metadata: arrow.NewMetadata([]string{proto.MetaKind, proto.MetaPgType}, []string{"int64", "bigint"})},
	{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: arrow.NewMetadata([]string{proto.MetaKind, proto.MetaPgType}, []string{"text", "text"})},
	{Name: proto.ColOp, Type: arrow.PrimitiveTypes.Int8},
	{Name: proto.ColLSN, Type: arrow.PrimitiveTypes.Uint64},
	{Name: proto.ColSeq, Type: arrow.PrimitiveTypes.Uint64},
	{Name: proto.ColCommitTime, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	{Name: proto.ColUnchanged, Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
}, func() *arrow.Metadata {
	m := arrow.NewMetadata([]string{proto.MetaTable, proto.MetaPrimaryKey, proto.MetaRouting}, []string{"public.orders", "id", "tenant"})
	return &m
}())

func str(s string) *string { return &s }

func encodeRows(t *testing.T, rows []row) []byte {
	t.Helper()
	b := array.NewRecordBuilder(memory.NewGoAllocator(), schema)
	defer b.Release()
	for _, r := range rows {
		if r.tenant == nil {
			b.Field(0).AppendNull()
		} else {
			b.Field(0).(*array.StringBuilder).Append(*r.tenant)
		}
		b.Field(1).(*array.Int64Builder).Append(r.id)
		b.Field(2).(*array.StringBuilder).Append(r.note)
		b.Field(3).(*array.Int8Builder).Append(r.op)
		b.Field(4).(*array.Uint64Builder).Append(r.lsn)
		b.Field(5).(*array.Uint64Builder).Append(r.seq)
		b.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(r.lsn))
		b.Field(7).AppendNull()
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	body, err := arrowcodec.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// publishBatch publishes rows to CHANGES as the reader would, with the
// headers of extra besides.
func (e *env) publishBatch(t *testing.T, ctx context.Context, rows []row, extra ...nats.Header) string {
	t.Helper()
	first := proto.Position{LSN: proto.LSN(rows[0].lsn), Seq: rows[0].seq}
	last := proto.Position{LSN: proto.LSN(rows[len(rows)-1].lsn), Seq: rows[len(rows)-1].seq}
	id := proto.ChangesMsgID("public.orders", first, last)
	msg := nats.NewMsg(proto.ChangesSubject("public.orders"))
	msg.Header.Set(proto.HeaderWire, proto.WireVersion)
	msg.Header.Set(proto.HeaderTable, "public.orders")
	msg.Header.Set(proto.HeaderSchema, arrowcodec.Fingerprint(schema))
	msg.Header.Set(proto.HeaderFirst, first.String())
	msg.Header.Set(proto.HeaderLast, last.String())
	msg.Header.Set(proto.HeaderMsgID, id)
	for _, h := range extra {
		for k, v := range h {
			msg.Header[k] = v
		}
	}
	natsotel.Inject(ctx, msg.Header)
	msg.Data = encodeRows(t, rows)
	if _, err := e.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	return id
}

// genBatches makes n batches of per rows across tenants, each with one
// routing mutation (move-out + update at the same position).
func genBatches(n, per int, tenants []string) [][]row {
	var out [][]row
	id := int64(0)
	lsn := uint64(1 << 32)
	for b := range n {
		var rows []row
		for i := 0; i < per; i++ {
			lsn++
			ten := tenants[(b*7+i)%len(tenants)]
			if i == per/2 {
				to := tenants[(b*7+i+1)%len(tenants)]
				rows = append(rows,
					row{tenant: str(ten), id: id, op: proto.OpMoveOut, lsn: lsn, seq: 1, note: "old"},
					row{tenant: str(to), id: id + 1, op: proto.OpUpdate, lsn: lsn, seq: 1, note: "new"})
				id += 2
				i++
				continue
			}
			rows = append(rows, row{tenant: str(ten), id: id, op: proto.OpInsert, lsn: lsn, seq: 1, note: "n" + strconv.Itoa(int(id))})
			id++
		}
		out = append(out, rows)
	}
	return out
}

// routedMsg is one message read back from ROUTED.
type routedMsg struct {
	subject string
	hdr     nats.Header
	ids     []int64
	tenants []string
	ops     []int8
	dests   []string // each row's ColDestination (ROUTED)
	runs    int      // destination runs (proto.DestinationRuns); -1: a refused column
}

func (e *env) readStream(t *testing.T, stream string) []routedMsg {
	t.Helper()
	ctx := t.Context()
	st, err := e.js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []routedMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		rm := routedMsg{subject: m.Subject, hdr: m.Header}
		if len(m.Data) > 0 {
			rec, err := arrowcodec.Decode(m.Data, nil)
			if err != nil && stream == proto.StreamDLQ {
				out = append(out, rm) // a poison body, dead-lettered as is
				continue
			}
			if err != nil {
				t.Fatalf("decoding %s seq %d: %v", stream, seq, err)
			}
			ids := rec.Column(1).(*array.Int64)
			ten := rec.Column(0).(*array.String)
			ops := rec.Column(3).(*array.Int8)
			if stream == proto.StreamRouted {
				runs, _, err := proto.DestinationRuns(rec)
				rm.runs = len(runs)
				if err != nil {
					rm.runs = -1
				}
				for _, r := range runs {
					for range r.Hi - r.Lo {
						rm.dests = append(rm.dests, r.Destination)
					}
				}
			}
			for i := 0; i < ids.Len(); i++ {
				rm.ids = append(rm.ids, ids.Value(i))
				rm.ops = append(rm.ops, ops.Value(i))
				if ten.IsNull(i) {
					rm.tenants = append(rm.tenants, "<null>")
				} else {
					rm.tenants = append(rm.tenants, ten.Value(i))
				}
			}
			rec.Release()
		}
		out = append(out, rm)
	}
	return out
}

// checkRouted verifies ROUTED holds every routable row of batches exactly
// once, in the destination its own tenant names (its ColDestination), in
// one message per (input, partition) on the partition's subject, each
// destination's rows one run. It returns a description of every violation.
func checkRouted(msgs []routedMsg, batches [][]row, partitions int) []string {
	var bad []string
	want := map[int64]string{}
	for _, b := range batches {
		for _, r := range b {
			if r.tenant == nil {
				continue
			}
			d, err := proto.DestinationName(*r.tenant)
			if err != nil {
				continue
			}
			want[r.id] = d
		}
	}
	got := map[int64]int{}
	ids := map[string]bool{}
	for _, m := range msgs {
		id := m.hdr.Get(proto.HeaderMsgID)
		p, err := strconv.Atoi(strings.TrimPrefix(m.subject, "sluice.routed."))
		if err != nil || proto.RoutedPartitionSubject(p) != m.subject {
			bad = append(bad, fmt.Sprintf("%s: not a partition subject", m.subject))
			continue
		}
		if ids[id] {
			bad = append(bad, "duplicate message "+id)
		}
		ids[id] = true
		// r:<input>:p<N>, or r:<input>:p<N>:<k> for a payload split's piece.
		if base, _, _ := strings.Cut(id, ":p"+strconv.Itoa(p)); !strings.HasPrefix(id, "r:") ||
			id != base+":p"+strconv.Itoa(p) && !strings.HasPrefix(id, base+":p"+strconv.Itoa(p)+":") {
			bad = append(bad, fmt.Sprintf("msg id %q does not name its partition %d", id, p))
		}
		if d := m.hdr.Get(proto.HeaderDestination); d != "" {
			bad = append(bad, fmt.Sprintf("%s: a Sluice-Destination header %q on a partition message", id, d))
		}
		if m.runs < 1 {
			bad = append(bad, fmt.Sprintf("%s: destination column refused or empty", id))
			continue
		}
		if n, _ := strconv.Atoi(m.hdr.Get(proto.HeaderRows)); n != len(m.ids) {
			bad = append(bad, fmt.Sprintf("%s: Sluice-Rows %d, body %d", id, n, len(m.ids)))
		}
		if n, _ := strconv.Atoi(m.hdr.Get(proto.HeaderDestinations)); n != m.runs {
			bad = append(bad, fmt.Sprintf("%s: Sluice-Destinations %d, body %d runs", id, n, m.runs))
		}
		for i, rid := range m.ids {
			got[rid]++
			dest := m.dests[i]
			if want[rid] != dest {
				bad = append(bad, fmt.Sprintf("row %d (tenant %s) in %q, want %q", rid, m.tenants[i], dest, want[rid]))
			}
			if proto.Partition(dest, partitions) != p {
				bad = append(bad, fmt.Sprintf("%s: row %d of %s on partition %d, want %d", id, rid, dest, p, proto.Partition(dest, partitions)))
			}
		}
	}
	for rid := range want {
		switch got[rid] {
		case 1:
		case 0:
			bad = append(bad, fmt.Sprintf("row %d lost", rid))
		default:
			bad = append(bad, fmt.Sprintf("row %d stored %d times", rid, got[rid]))
		}
	}
	sort.Strings(bad)
	return bad
}

// drained reports whether the router consumer has acked everything.
func (e *env) drained(t *testing.T) bool {
	t.Helper()
	c, err := e.js.Consumer(t.Context(), proto.StreamChanges, proto.ConsumerRouter)
	if err != nil {
		return false
	}
	ci, err := c.Info(t.Context())
	if err != nil {
		return false
	}
	return ci.NumPending == 0 && ci.NumAckPending == 0 && ci.NumRedelivered == 0
}

func runRouter(t *testing.T, r *Router) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestRouteEndToEnd(t *testing.T) {
	e := startEnv(t)
	reg := prometheus.NewRegistry()
	r, err := New(e.cfg, Deps{JS: e.js, Log: quiet, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, r)

	tenants := []string{"shop1", "shop2", "a.b", "42", "550e8400-e29b-41d4-a716-446655440000", strings.Repeat("z", 65)}
	batches := genBatches(5, 20, tenants)
	// Unroutable rows: NULL and a value too long for any name.
	batches[2] = append(batches[2],
		row{tenant: nil, id: 9000, op: proto.OpInsert, lsn: 1 << 40, seq: 1},
		row{tenant: str(strings.Repeat("é.", 80)), id: 9001, op: proto.OpInsert, lsn: 1<<40 + 1, seq: 1})
	for _, b := range batches {
		e.publishBatch(t, t.Context(), b)
	}
	// A tick is acked with no output; a poison body is dead-lettered whole.
	tick := nats.NewMsg(proto.SubjectTick)
	tick.Header.Set(proto.HeaderWire, proto.WireVersion)
	if _, err := e.js.PublishMsg(t.Context(), tick); err != nil {
		t.Fatal(err)
	}
	poison := nats.NewMsg(proto.ChangesSubject("public.orders"))
	poison.Header.Set(proto.HeaderWire, proto.WireVersion)
	poison.Header.Set(proto.HeaderMsgID, "poison")
	poison.Data = []byte("not arrow")
	if _, err := e.js.PublishMsg(t.Context(), poison); err != nil {
		t.Fatal(err)
	}
	wrongWire := nats.NewMsg(proto.ChangesSubject("public.orders"))
	wrongWire.Header.Set(proto.HeaderWire, "2.0")
	wrongWire.Header.Set(proto.HeaderMsgID, "wire2")
	wrongWire.Data = encodeRows(t, batches[0])
	if _, err := e.js.PublishMsg(t.Context(), wrongWire); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "router to drain CHANGES", func() bool { return e.drained(t) })
	stop()

	if bad := checkRouted(e.readStream(t, proto.StreamRouted), batches, e.cfg.Delivery.Partitions); len(bad) > 0 {
		t.Fatalf("ROUTED is wrong:\n%s", strings.Join(bad, "\n"))
	}
	dlq := e.readStream(t, proto.StreamDLQ)
	var unroutable, whole int
	for _, m := range dlq {
		switch {
		case len(m.ids) == 2:
			unroutable++
			if m.ids[0] != 9000 || m.ids[1] != 9001 {
				t.Errorf("unroutable dead letter holds rows %v", m.ids)
			}
			reason := m.hdr.Get(proto.HeaderReason)
			if !strings.Contains(reason, "NULL routing value") || !strings.Contains(reason, "unroutable value") {
				t.Errorf("unroutable reason %q", reason)
			}
		case m.hdr.Get(natsx.HeaderOrigMsgID) == "poison" || m.hdr.Get(natsx.HeaderOrigMsgID) == "wire2":
			whole++
		}
	}
	if unroutable != 1 || whole != 2 || len(dlq) != 3 {
		t.Fatalf("DLQ: %d unroutable, %d whole, %d total; want 1, 2, 3", unroutable, whole, len(dlq))
	}
	st := r.Status()
	rows := 0
	for _, b := range batches {
		rows += len(b)
	}
	if st.Batches != 5 || st.Rows != int64(rows) || st.DeadLetters != 1 || st.DeadLetterRows != 2 || st.Destinations != len(tenants) || st.Mutations != 5 || st.LastError == "" {
		t.Fatalf("status %+v", st)
	}
	if got := testutil.ToFloat64(r.h.Metrics().Mutations); got != 5 {
		t.Fatalf("routing mutations metric %v, want 5", got)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_router_split_duration_seconds", "sluice_router_destinations_per_batch", "sluice_router_messages_per_batch"); err != nil || n != 3 {
		t.Fatalf("histograms: %d, %v", n, err)
	}
	// Messages per batch are bounded by the partitions the batch touches,
	// not by its destinations: every batch holds all six tenants (five
	// routable), fewer than the partitions each would have alone.
	touched := map[int]bool{}
	for _, ten := range tenants {
		if d, err := proto.DestinationName(ten); err == nil {
			touched[proto.Partition(d, e.cfg.Delivery.Partitions)] = true
		}
	}
	mf, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range mf {
		if f.GetName() != "sluice_router_messages_per_batch" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 5 || h.GetSampleSum() != float64(5*len(touched)) {
			t.Fatalf("messages per batch: %d batches, %v messages; want 5 batches of %d", h.GetSampleCount(), h.GetSampleSum(), len(touched))
		}
	}
}

// TestReplicaKilledMidBatch: two replicas share the durable consumer; the
// one that takes the first batch dies after some of its outputs are stored
// and before it acks. The batch is redelivered to the survivor, which
// republishes everything; the ids deduplicate. ROUTED holds every row once.
func TestReplicaKilledMidBatch(t *testing.T) {
	bad := crashMidBatch(t, false)
	if len(bad) > 0 {
		t.Fatalf("ROUTED is wrong after a replica died mid-batch:\n%s", strings.Join(bad, "\n"))
	}
}

// TestReplicaKilledMidBatchNegativeControl acks the input before publishing
// (the rule switched off): the same crash must lose rows.
func TestReplicaKilledMidBatchNegativeControl(t *testing.T) {
	bad := crashMidBatch(t, true)
	lost := 0
	for _, b := range bad {
		if strings.HasSuffix(b, " lost") {
			lost++
		}
	}
	if lost == 0 {
		t.Fatalf("acking before publishing lost nothing: the crash test cannot see the rule (violations: %v)", bad)
	}
	t.Logf("negative control: %d rows lost with the rule switched off, as expected", lost)
}

func crashMidBatch(t *testing.T, unsafeAckFirst bool) []string {
	e := startEnv(t)
	tenants := []string{"t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"}
	batches := genBatches(6, 24, tenants)
	for _, b := range batches {
		e.publishBatch(t, t.Context(), b)
	}
	var killed atomic.Int32
	var once sync.Once
	killedCh := make(chan struct{})
	mk := func(name string) (*Router, func()) {
		nc, js := e.connect(t, name)
		ctx, cancel := context.WithCancel(context.Background())
		o := route.Options{Window: 2, UnsafeAckFirst: unsafeAckFirst}
		o.AfterAck = func(_ context.Context, input string, stored, total int) error {
			fired := false
			if stored == 2 && total > 3 {
				once.Do(func() {
					// kill -9: the connection vanishes, no ack or nak is sent.
					nc.Close()
					killed.Add(1)
					fired = true
					close(killedCh)
				})
			}
			if fired {
				cancel()
				return errors.New("killed")
			}
			return nil
		}
		r, err := newRouter(e.cfg, Deps{JS: js, Log: quiet}, o)
		if err != nil {
			t.Fatal(err)
		}
		r.ackWait = time.Second // redeliver quickly
		r.fetch = 1
		done := make(chan struct{})
		go func() { _ = r.Run(ctx); close(done) }()
		stop := func() { cancel(); <-done }
		t.Cleanup(stop)
		return r, stop
	}
	ra, stopA := mk("router-a")
	rb, stopB := mk("router-b")
	select {
	case <-killedCh:
	case <-time.After(20 * time.Second):
		t.Fatal("no replica was killed")
	}
	eventually(t, 30*time.Second, "survivor to drain CHANGES", func() bool { return e.drained(t) })
	stopA()
	stopB()
	if killed.Load() != 1 {
		t.Fatalf("%d replicas killed", killed.Load())
	}
	t.Logf("replica a routed %d batches, b %d; published %d + %d", ra.Status().Batches, rb.Status().Batches, ra.Status().Published, rb.Status().Published)
	return checkRouted(e.readStream(t, proto.StreamRouted), batches, e.cfg.Delivery.Partitions)
}

// TestOversizedOutputIsSplit: a partition's rows that would exceed the
// payload limit go out as several messages, each under it, each with its
// own span; the small destination sharing the partition keeps its rows.
func TestOversizedOutputIsSplit(t *testing.T) {
	e := startEnv(t)
	cfg := e.cfg
	cfg.NATS.MaxPayload = 16 << 10
	var rows []row
	for i := range 300 {
		rows = append(rows, row{tenant: str("big"), id: int64(i), op: proto.OpInsert, lsn: uint64(100 + i), seq: 1, note: strings.Repeat("x", 200)})
	}
	rows = append(rows, row{tenant: str("small"), id: 1000, op: proto.OpInsert, lsn: 1000, seq: 1})
	// Published before the router applies the smaller limit to the streams.
	e.publishBatch(t, t.Context(), rows)
	r, err := New(cfg, Deps{JS: e.js, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	eventually(t, 20*time.Second, "router to drain CHANGES", func() bool { return e.drained(t) })
	msgs := e.readStream(t, proto.StreamRouted)
	if bad := checkRouted(msgs, [][]row{rows}, cfg.Delivery.Partitions); len(bad) > 0 {
		t.Fatalf("ROUTED is wrong:\n%s", strings.Join(bad, "\n"))
	}
	lsn := func(id int64) uint64 { // as the rows above were made
		if id == 1000 {
			return 1000
		}
		return uint64(100 + id)
	}
	big := 0
	for _, m := range msgs {
		if m.subject != proto.RoutedPartitionSubject(proto.Partition("big", cfg.Delivery.Partitions)) {
			continue
		}
		if id := m.hdr.Get(proto.HeaderMsgID); !strings.HasSuffix(id, ":"+strconv.Itoa(big)) {
			t.Errorf("piece %d has id %s", big, id)
		}
		big++
		lo, hi := lsn(m.ids[0]), lsn(m.ids[0])
		for _, id := range m.ids {
			lo, hi = min(lo, lsn(id)), max(hi, lsn(id))
		}
		first, _ := proto.ParsePosition(m.hdr.Get(proto.HeaderFirst))
		last, _ := proto.ParsePosition(m.hdr.Get(proto.HeaderLast))
		if uint64(first.LSN) != lo || uint64(last.LSN) != hi {
			t.Errorf("piece %s: span %v..%v, its rows' LSNs %d..%d", m.hdr.Get(proto.HeaderMsgID), first, last, lo, hi)
		}
	}
	if big < 4 {
		t.Fatalf("60 KB for one partition went out in %d messages under a 16 KiB limit", big)
	}
}

// TestTraceContinues: the route span is a child of the reader's span and
// every output carries it.
func TestTraceContinues(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(context.Background()) })

	e := startEnv(t)
	r, err := New(e.cfg, Deps{JS: e.js, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	rctx, readerSpan := tp.Tracer("reader").Start(context.Background(), "publish")
	e.publishBatch(t, rctx, genBatches(1, 10, []string{"a", "b", "c"})[0])
	readerSpan.End()
	eventually(t, 20*time.Second, "router to drain CHANGES", func() bool { return e.drained(t) })

	var routeSpan sdktrace.ReadOnlySpan
	eventually(t, 5*time.Second, "the route span", func() bool {
		for _, s := range exp.GetSpans().Snapshots() {
			if strings.HasPrefix(s.Name(), "route ") {
				routeSpan = s
				return true
			}
		}
		return false
	})
	if routeSpan.Parent().SpanID() != readerSpan.SpanContext().SpanID() || routeSpan.SpanContext().TraceID() != readerSpan.SpanContext().TraceID() {
		t.Fatalf("route span parent %v, want the reader's %v", routeSpan.Parent().SpanID(), readerSpan.SpanContext().SpanID())
	}
	attrs := map[string]string{}
	for _, a := range routeSpan.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs["messaging.system"] != "nats" || attrs["sluice.destinations"] != "3" || attrs["sluice.rows"] != "10" || attrs["messaging.destination.name"] == "" {
		t.Fatalf("route span attributes %v", attrs)
	}
	for _, m := range e.readStream(t, proto.StreamRouted) {
		sc := trace.SpanContextFromContext(natsotel.Extract(context.Background(), m.hdr))
		if sc.SpanID() != routeSpan.SpanContext().SpanID() || sc.TraceID() != readerSpan.SpanContext().TraceID() {
			t.Fatalf("output %s carries %v, want the route span", m.subject, sc)
		}
	}
}

// TestClaimBytesCarriedOn: the bytes a batch carries by reference
// (Sluice-Claim-Bytes, for the flusher's memory budget) reach every output
// of it; a batch without them gives outputs without.
func TestClaimBytesCarriedOn(t *testing.T) {
	e := startEnv(t)
	r, err := New(e.cfg, Deps{JS: e.js, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	batches := genBatches(2, 4, []string{"a", "b"})
	e.publishBatch(t, t.Context(), batches[0], nats.Header{proto.HeaderClaimBytes: {"12345"}})
	eventually(t, 20*time.Second, "router to drain CHANGES", func() bool { return e.drained(t) })
	out := e.readStream(t, proto.StreamRouted)
	if len(out) == 0 {
		t.Fatal("no output")
	}
	for _, m := range out {
		if got := m.hdr.Get(proto.HeaderClaimBytes); got != "12345" {
			t.Fatalf("output %s: %s %q, want 12345", m.subject, proto.HeaderClaimBytes, got)
		}
	}
	e.publishBatch(t, t.Context(), batches[1])
	eventually(t, 20*time.Second, "router to drain CHANGES", func() bool { return e.drained(t) })
	for _, m := range e.readStream(t, proto.StreamRouted)[len(out):] {
		if got := m.hdr.Get(proto.HeaderClaimBytes); got != "" {
			t.Fatalf("output %s of a batch without claims: %s %q", m.subject, proto.HeaderClaimBytes, got)
		}
	}
}
