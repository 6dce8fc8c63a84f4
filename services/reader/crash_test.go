package reader

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/capture"
)

// kill ends a reader the way kill -9 would, as far as Postgres and
// JetStream can tell: its context is cancelled with no final status update
// (Stream never sends one on exit) and its walsender is terminated.
func (e *env) kill(run *running) {
	e.t.Helper()
	run.cancel()
	select {
	case <-run.done:
	case <-time.After(30 * time.Second):
		e.t.Fatal("reader did not stop")
	}
	stopOnce.Store(run, true)
	run.pool.Close()
	e.exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_replication WHERE application_name = 'sluice-reader'`)
}

// stuckFuture is an ack that never arrives: a publish still in flight.
type stuckFuture struct{ msg *nats.Msg }

func (f stuckFuture) Ok() <-chan *jetstream.PubAck { return nil }
func (f stuckFuture) Err() <-chan error            { return nil }
func (f stuckFuture) Msg() *nats.Msg               { return f.msg }

// lossScenario runs the deterministic interleaving of the negative control
// and returns the ids whose insert is missing from CHANGES after a crash
// and a restart.
//
// JetStream acks arrive in order on one connection, so out-of-order acks
// are injected (a fake, only for this fault): the publish hook withholds
// the third data message (it never reaches the broker and its ack never
// comes, like a publish still in flight when the process dies) and sends
// every later message unchained, so their acks arrive while the third is
// unresolved. The reader is then killed after it had the chance to send
// standby status updates. With the prefix-complete rule the confirmed LSN
// stays below the withheld message and the restart republishes it; with
// scalar-max it jumps past it and the change is lost.
func lossScenario(t *testing.T, scalarMax bool) []int {
	e := newEnv(t, "public.items")
	e.cfg.Reader.BatchRows = 1 // one message per row: the withheld message is one insert
	e.exec(schemaSQL)
	var dataMsgs atomic.Int64
	var confirmed atomic.Uint64
	var withheld atomic.Value
	var statuses atomic.Int64
	hook := func(real capture.PublishFunc) capture.PublishFunc {
		return func(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
			if msg.Subject == proto.SubjectTick {
				return real(msg, opts...)
			}
			n := dataMsgs.Add(1)
			switch {
			case n < 3:
				return real(msg, opts...)
			case n == 3:
				withheld.Store(msg.Header.Get(proto.HeaderLast))
				return stuckFuture{msg}, nil
			default:
				return real(msg) // unchained: the withheld message is not in the stream
			}
		}
	}
	run := e.start(e.newReader("k", func(r *Reader) {
		r.rules.scalarMax = scalarMax
		r.publishHook = hook
		r.onConfirm = func(l proto.LSN) { confirmed.Store(uint64(l)); statuses.Add(1) }
	}))
	waitStreaming(t, run)
	const n = 8
	for i := 1; i <= n; i++ {
		e.exec(fmt.Sprintf(`INSERT INTO items VALUES ('t', %d, 'v')`, i))
	}
	// Every message but the withheld one is stored.
	waitRows(t, e, n-1)
	held, err := proto.ParsePosition(withheld.Load().(string))
	if err != nil {
		t.Fatal(err)
	}
	// Let the reader send a few standby status updates, then crash it.
	sent := statuses.Load()
	eventually(t, 5*time.Second, func() error {
		if scalarMax && proto.LSN(confirmed.Load()) <= held.LSN {
			return fmt.Errorf("scalar-max has not confirmed past the withheld %s yet", held)
		}
		if !scalarMax && proto.LSN(confirmed.Load()) > held.LSN {
			return fmt.Errorf("prefix-complete confirmed %s past the withheld %s", proto.LSN(confirmed.Load()), held)
		}
		if statuses.Load() < sent+3 {
			return fmt.Errorf("no new status update")
		}
		return nil
	})
	e.kill(run)
	// Restart without faults and let it catch up.
	run2 := e.start(e.newReader("k", nil))
	waitStreaming(t, run2)
	e.exec(`INSERT INTO items VALUES ('t', 1000, 'marker')`)
	var missing []int
	eventually(t, 20*time.Second, func() error {
		rows, _, _ := e.changes()
		seen := map[int64]bool{}
		for _, r := range rows {
			seen[r.vals["id"].(int64)] = true
		}
		if !seen[1000] {
			return fmt.Errorf("marker not yet streamed")
		}
		missing = nil
		for i := 1; i <= n; i++ {
			if !seen[int64(i)] {
				missing = append(missing, i)
			}
		}
		return nil
	})
	return missing
}

func TestCrashOutOfOrderAcks(t *testing.T) {
	if missing := lossScenario(t, false); len(missing) > 0 {
		t.Fatalf("prefix-complete confirm lost inserts %v", missing)
	}
}

// TestCrashOutOfOrderAcksNegativeControl switches the rule off (scalar-max)
// and must observe the loss: this is the test above failing without the rule.
func TestCrashOutOfOrderAcksNegativeControl(t *testing.T) {
	missing := lossScenario(t, true)
	if len(missing) == 0 {
		t.Fatal("negative control: scalar-max confirm lost nothing; the scenario no longer exercises the rule")
	}
	t.Logf("scalar-max lost inserts %v (expected)", missing)
}

// TestKillRestartRandom kills the reader at random points of a mixed
// workload (inserts, updates, tenant moves, deletes, one large transaction
// at times) and restarts it; in the end the CHANGES stream, applied by
// position, equals the source table, and every insert is in it.
func TestKillRestartRandom(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	e := newEnv(t, "public.items")
	e.cfg.Reader.BatchRows = 50
	e.exec(schemaSQL)
	// The slot exists before the workload starts (no backfill here).
	first := e.start(e.newReader("k", nil))
	waitStreaming(t, first)
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var inserted atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		workload(ctx, t, e.dsn, &inserted)
	}()
	rnd := rand.New(rand.NewPCG(42, 1))
	for i := 0; i < 8; i++ {
		run := first
		if i > 0 {
			run = e.start(e.newReader("k", nil))
			if i%2 == 0 { // every other kill lands mid-stream, the rest anywhere
				waitStreaming(t, run)
			}
		}
		time.Sleep(time.Duration(rnd.IntN(400)) * time.Millisecond)
		e.kill(run)
	}
	stopLoad()
	wg.Wait()
	run := e.start(e.newReader("k", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO items VALUES ('marker', 0, 'end')`)
	eventually(t, 60*time.Second, func() error {
		rows, _, _ := e.changes()
		for _, r := range rows {
			if r.vals["tenant_id"] == "marker" {
				return nil
			}
		}
		return fmt.Errorf("marker not streamed")
	})
	rows, _, msgs := e.changes()
	got := apply(rows, "tenant_id", "id")
	want := sourceRows(t, e.dsn)
	if len(got) != len(want) {
		t.Errorf("applied stream has %d rows, source %d", len(got), len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("row %s missing from the stream", k)
			continue
		}
		if g.vals["v"] != w {
			t.Errorf("row %s: stream %v, source %v", k, g.vals["v"], w)
		}
	}
	ids := map[int64]bool{}
	for _, r := range rows {
		if r.op == proto.OpInsert {
			ids[r.vals["id"].(int64)] = true
		}
	}
	if int64(len(ids)) < inserted.Load() {
		t.Errorf("%d distinct inserted ids in the stream, %d committed", len(ids), inserted.Load())
	}
	// Duplicates are only those JetStream could not drop by id.
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.Header.Get(proto.HeaderMsgID)]++
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("message id %s stored %d times", id, n)
		}
	}
	t.Logf("%d messages, %d rows, %d source rows, %d inserts", len(msgs), len(rows), len(want), inserted.Load())
}

func sourceRows(t *testing.T, dsn string) map[string]any {
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rs, err := conn.Query(context.Background(), `SELECT tenant_id, id, v FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for rs.Next() {
		var tn string
		var id int64
		var v *string
		if err := rs.Scan(&tn, &id, &v); err != nil {
			t.Fatal(err)
		}
		var val any
		if v != nil {
			val = *v
		}
		out[fmt.Sprintf("public.items|%v|%v", tn, id)] = val
	}
	return out
}

// workload commits random transactions until ctx ends.
func workload(ctx context.Context, t *testing.T, dsn string, inserted *atomic.Int64) {
	workloadFrom(ctx, t, dsn, inserted, 1)
}

// workloadFrom is workload with new ids from next on.
func workloadFrom(ctx context.Context, t *testing.T, dsn string, inserted *atomic.Int64, next int64) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(context.Background())
	r := rand.New(rand.NewPCG(7, uint64(next)))
	var live []int64
	for i := int64(1); i < min(next, 3001); i += 7 {
		live = append(live, i) // rows a backfill test created
	}
	for ctx.Err() == nil {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return
		}
		ops := 1 + r.IntN(5)
		if r.IntN(20) == 0 {
			ops = 500
		}
		ins := 0
		for i := 0; i < ops; i++ {
			var q string
			switch k := r.IntN(10); {
			case k < 5 || len(live) == 0:
				q = fmt.Sprintf(`INSERT INTO items VALUES ('t%d', %d, 'v%d')`, next%7, next, r.IntN(1000))
				live = append(live, next)
				next++
				ins++
			case k < 8:
				q = fmt.Sprintf(`UPDATE items SET v = 'u%d' WHERE id = %d`, r.IntN(1000), live[r.IntN(len(live))])
			case k < 9:
				q = fmt.Sprintf(`UPDATE items SET tenant_id = 't%d' WHERE id = %d`, r.IntN(7), live[r.IntN(len(live))])
			default:
				j := r.IntN(len(live))
				q = fmt.Sprintf(`DELETE FROM items WHERE id = %d`, live[j])
				live = append(live[:j], live[j+1:]...)
			}
			if _, err := tx.Exec(ctx, q); err != nil {
				_ = tx.Rollback(context.Background())
				return
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return
		}
		inserted.Add(int64(ins))
	}
	sort.Slice(live, func(i, j int) bool { return live[i] < live[j] })
}
