package reader

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/pgtypes"
)

func TestMain(m *testing.M) {
	// A recording tracer provider (no exporter), so spans have real ids and
	// messages carry traceparent.
	otel.SetTracerProvider(sdktrace.NewTracerProvider())
	goleak.VerifyTestMain(&mainWrapper{m},
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"))
}

type mainWrapper struct{ m *testing.M }

func (w *mainWrapper) Run() int {
	code := w.m.Run()
	pgtest.Shutdown()
	return code
}

// env is one test's source database, JetStream server and configuration.
type env struct {
	t   testing.TB
	dsn string
	cfg config.Config
	nc  *nats.Conn
	js  jetstream.JetStream
	mem *memory.CheckedAllocator
	// alloc is what readers allocate from: mem, except in benchmarks.
	alloc memory.Allocator
}

func newEnv(t testing.TB, tables ...string) *env {
	t.Helper()
	dsn := pgtest.NewDB(t)
	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir(), MaxPayload: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Source.DSN = dsn
	cfg.Source.Tables = tables
	cfg.Source.Slot = "sluice_test"
	cfg.Source.Publication = "sluice_test"
	cfg.Reader.BatchInterval = 20 * time.Millisecond
	cfg.Reader.StatusInterval = 50 * time.Millisecond
	cfg.Reader.LeaseTTL = 3 * time.Second
	cfg.Reader.BatchRows = 1000
	cfg.Reader.SpillDir = t.TempDir() // streamed transactions (protocol 2)
	if err := natsx.EnsureStreams(context.Background(), js, cfg); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dsn: dsn, cfg: cfg, nc: nc, js: js, mem: memory.NewCheckedAllocator(memory.NewGoAllocator())}
	e.alloc = e.mem
	// Runs after every reader of the test stopped (cleanups run last-in
	// first-out): every Arrow buffer was released.
	t.Cleanup(func() {
		if n := e.mem.CurrentAlloc(); n != 0 {
			t.Errorf("arrow allocator: %d bytes still allocated", n)
		}
	})
	return e
}

func (e *env) statePool() *pgxpool.Pool {
	e.t.Helper()
	pool, err := pgxpool.New(context.Background(), e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	return pool
}

func (e *env) exec(sql string) { e.t.Helper(); pgtest.Exec(e.t, e.dsn, sql) }

func (e *env) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// running is a reader running in the background.
type running struct {
	r      *Reader
	cancel context.CancelFunc
	done   chan error
	pool   *pgxpool.Pool
}

func (e *env) newReader(holder string, tweak func(*Reader)) *Reader {
	e.t.Helper()
	r, err := New(e.cfg, Deps{JS: e.js, Log: e.logger().With("holder", holder), Metrics: prometheus.NewRegistry(), Holder: holder, Mem: e.alloc})
	if err != nil {
		e.t.Fatal(err)
	}
	if tweak != nil {
		tweak(r)
	}
	return r
}

func (e *env) start(r *Reader) *running {
	e.t.Helper()
	pool, err := pgxpool.New(context.Background(), e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	r.deps.State = pool
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{r: r, cancel: cancel, done: make(chan error, 1), pool: pool}
	go func() { run.done <- r.Run(ctx) }()
	e.t.Cleanup(func() { run.stop(e.t) })
	return run
}

var stopOnce sync.Map

// stop cancels the reader (no final status update is sent: Stream never
// sends one) and waits for it.
func (r *running) stop(t testing.TB) {
	if _, loaded := stopOnce.LoadOrStore(r, true); loaded {
		return
	}
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("reader returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("reader did not stop")
	}
	r.pool.Close()
}

// eventually retries f until it returns nil or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("not true after %s: %v", timeout, err)
}

// row is one decoded CHANGES row: its columns by name (normalized values).
type row struct {
	table     string
	op        int8
	pos       proto.Position
	vals      map[string]any
	unchanged []string
	claims    []string // columns carried by reference
	schema    string
	msgID     string
}

func (r row) String() string {
	return fmt.Sprintf("%s op=%d %s %v unchanged=%v", r.table, r.op, r.pos, r.vals, r.unchanged)
}

// changes reads every message of CHANGES in stream order.
func (e *env) changes() (rows []row, ticks []proto.LSN, msgs []*jetstream.RawStreamMsg) {
	e.t.Helper()
	ctx := context.Background()
	st, err := e.js.Stream(ctx, proto.StreamChanges)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			e.t.Fatal(err)
		}
		msgs = append(msgs, m)
		if m.Subject == proto.SubjectTick {
			l, _ := proto.ParseLSN(m.Header.Get(proto.HeaderThrough))
			ticks = append(ticks, l)
			continue
		}
		rows = append(rows, decodeRows(e.t, m)...)
	}
	return rows, ticks, msgs
}

func decodeRows(t testing.TB, m *jetstream.RawStreamMsg) []row {
	rec, err := arrowcodec.Decode(m.Data, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	sc := rec.Schema()
	table, _ := sc.Metadata().GetValue(proto.MetaTable)
	if n, _ := strconv.Atoi(m.Header.Get(proto.HeaderRows)); n != int(rec.NumRows()) {
		t.Fatalf("Sluice-Rows %d, body has %d", n, rec.NumRows())
	}
	if fp := arrowcodec.Fingerprint(sc); fp != m.Header.Get(proto.HeaderSchema) {
		t.Fatalf("Sluice-Schema %s, body fingerprint %s", m.Header.Get(proto.HeaderSchema), fp)
	}
	var out []row
	for i := 0; i < int(rec.NumRows()); i++ {
		r := row{table: table, vals: map[string]any{}, schema: m.Header.Get(proto.HeaderSchema), msgID: m.Header.Get(proto.HeaderMsgID)}
		for c, f := range sc.Fields() {
			col := rec.Column(c)
			switch f.Name {
			case proto.ColOp:
				r.op = col.(*array.Int8).Value(i)
			case proto.ColLSN:
				r.pos.LSN = proto.LSN(col.(*array.Uint64).Value(i))
			case proto.ColSeq:
				r.pos.Seq = col.(*array.Uint64).Value(i)
			case proto.ColCommitTime:
			case proto.ColUnchanged, proto.ColClaims:
				l := col.(*array.List)
				if l.IsValid(i) {
					s, e := l.ValueOffsets(i)
					for j := s; j < e; j++ {
						v := l.ListValues().(*array.String).Value(int(j))
						if f.Name == proto.ColClaims {
							r.claims = append(r.claims, v)
						} else {
							r.unchanged = append(r.unchanged, v)
						}
					}
				}
			default:
				k, err := proto.FieldKind(f)
				if err != nil {
					t.Fatal(err)
				}
				r.vals[f.Name] = pgtypes.Value(col, i, k)
			}
		}
		out = append(out, r)
	}
	return out
}

// keyOf renders a row's key columns.
func keyOf(r row, cols ...string) string {
	s := r.table
	for _, c := range cols {
		s += fmt.Sprintf("|%v", r.vals[c])
	}
	return s
}

// apply folds rows into the newest state per key, as every destination
// does: the newest position wins; tombstones delete; a clear (proto.OpClear)
// hides every row of its table below it (of its tenant_id only when it
// carries one), as the catalog's reads do.
func apply(rows []row, key ...string) map[string]row {
	sorted := append([]row(nil), rows...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].pos.Less(sorted[j].pos) })
	state := map[string]row{}
	for _, r := range sorted {
		if proto.IsClear(r.op) {
			// As the catalog reads a clear: every row below it goes (in
			// its scope: the rows holding its non-NULL routing value).
			for k, s := range state {
				in := s.table == r.table
				for c, v := range r.vals {
					if v != nil && s.vals[c] != v {
						in = false
					}
				}
				if in {
					delete(state, k)
				}
			}
			continue
		}
		k := keyOf(r, key...)
		if proto.IsTombstone(r.op) {
			delete(state, k)
			continue
		}
		state[k] = r
	}
	return state
}
