package reader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/capture"
	"github.com/sluice-cdc/sluice/shared/natsx"
)

// BigTxEnv, set to 1, runs TestBigTransaction (heavy: ~2 GB of row data,
// ~10 GB of disk for the table, its WAL, Postgres's reorder-buffer spill and
// the JetStream store; ~2 minutes), and its negative control
// TestBigTransactionHeldWholeExceedsBound (512 MB). BigTxMBEnv scales the
// first (default 2048 MB of row data), e.g. to 1024 when disk or time is
// short:
//
//	cd services/reader && SLUICE_BIG_TX=1 go test -run TestBigTransaction -v -timeout 40m .
//	cd services/reader && SLUICE_BIG_TX=1 SLUICE_BIG_TX_MB=1024 go test -run TestBigTransaction -v -timeout 40m .
const (
	BigTxEnv   = "SLUICE_BIG_TX"
	BigTxMBEnv = "SLUICE_BIG_TX_MB"
)

// Configuration of the big-transaction test, and the bound it asserts.
//
// A transaction is never held whole: the reader appends each change to
// its table's Arrow builder and cuts (encodes and publishes) the batch as
// soon as it reaches batch_bytes, inside the transaction; a published
// message is referenced until JetStream acks it, and at most max_in_flight
// messages are unacked. So the data the reader holds is at most
// (max_in_flight + 1) batches of ~batch_bytes (the in-flight bodies and
// the builder being filled), independent of the transaction's size.
//
// Two things multiply that by a small constant. (1) arrowcodec.Encode
// returns bytes.Buffer.Bytes(), whose backing array is up to twice the
// body's length (buffer growth), and an in-flight message pins all of it:
// the negative control measured 537 MB of retained bodies as 1081 MiB of
// live heap. (2) The test process also runs the embedded NATS server,
// whose heap is the same Go heap and which holds each in-flight message
// for a while (the connection's message buffer, the stream's inbound
// queue, the file store's cache of the last block). So each in-flight
// batch counts three times:
//
//	liveBound  = 3 x max_in_flight x batch_bytes + 64 MiB
//	           = 3 x 16 x 4 MiB + 64 MiB = 256 MiB
//
// where the 64 MiB fixed overhead is the Go runtime, pgx, the NATS client
// and server's own structures, the builder being filled, its encoded copy,
// and the test itself. liveBound is asserted on the peak of the live heap
// (/gc/heap/live:bytes, what the last GC found reachable). The Go heap in
// use (HeapInuse: live plus garbage not yet swept) is asserted under the
// soft memory limit the test sets, bigTxMemLimit = 512 MiB (2 x liveBound,
// the GOGC=100 heap goal of a 256 MiB live heap): the GC keeps the heap
// under it only while the live heap fits, so a reader holding the
// transaction whole (2 GB) fails both assertions by far.
const (
	bigTxInFlight   = 16
	bigTxBatchBytes = 4 << 20
	bigTxOverhead   = 64 << 20
	bigTxLiveBound  = 3*bigTxInFlight*bigTxBatchBytes + bigTxOverhead
	bigTxMemLimit   = 512 << 20
	// bigTxValue is the text column's width: 31 md5 hex digests, 992
	// bytes, below the TOAST threshold (~2 KB) so Postgres neither
	// compresses nor moves it out of line: the WAL carries every byte.
	bigTxValue = 31 * 32
)

// heapSampler records the peak Go heap every 50 ms.
type heapSampler struct {
	mu       sync.Mutex
	peakUse  uint64 // HeapInuse: objects (live + unswept) + unused span bytes
	peakLive uint64 // /gc/heap/live:bytes at the last GC
	samples  int
	stop     chan struct{}
	done     chan struct{}
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	go func() {
		defer close(h.done)
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			metrics.Read(s)
			inuse := s[0].Value.Uint64() + s[1].Value.Uint64()
			live := s[2].Value.Uint64()
			h.mu.Lock()
			h.peakUse = max(h.peakUse, inuse)
			h.peakLive = max(h.peakLive, live)
			h.samples++
			h.mu.Unlock()
			select {
			case <-h.stop:
				return
			case <-tk.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) finish() (peakUse, peakLive uint64, samples int) {
	close(h.stop)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peakUse, h.peakLive, h.samples
}

// One ~2 GB transaction streams through the reader with its heap under a
// fixed bound (see bigTxLiveBound): it is published in chunks, never held
// whole. It runs under both pgoutput protocols and reports, side by side,
// how long after its commit the transaction is fully published (every row
// acked by JetStream in CHANGES) and the reader's peak heap: protocol 1
// receives nothing before the commit (Postgres spills it on the server and
// sends it then), protocol 2 receives it while it runs and spills it to the
// reader's disk (capture/spill.go), so at the commit only the replay from
// local disk is left.
func TestBigTransaction(t *testing.T) {
	dataMB := bigTxSetup(t, 2048)
	var res []bigTxResult
	for _, protocol := range []int{1, 2} {
		t.Run(fmt.Sprintf("protocol=%d", protocol), func(t *testing.T) {
			r := bigTx(t, dataMB, false, protocol)
			if r.peakLive > bigTxLiveBound {
				t.Errorf("peak live heap %d MiB above the bound %d MiB", r.peakLive>>20, bigTxLiveBound>>20)
			}
			if r.peakUse > bigTxMemLimit {
				t.Errorf("peak heap in use %d MiB above the memory limit %d MiB", r.peakUse>>20, bigTxMemLimit>>20)
			}
			res = append(res, r)
		})
	}
	for _, r := range res {
		t.Logf("protocol %d: %d MB transaction (%.0f MB WAL): insert+commit %s, fully published %s after its commit; reader peak live heap %.0f MiB, in use %.0f MiB; spill peak %.0f MB",
			r.protocol, r.dataMB, r.walMB, r.insert.Round(time.Millisecond), r.afterCommit.Round(time.Millisecond),
			float64(r.peakLive)/(1<<20), float64(r.peakUse)/(1<<20), float64(r.spillPeak)/(1<<20))
	}
}

// bigTxResult is one run of bigTx.
type bigTxResult struct {
	protocol          int
	dataMB            int64
	walMB             float64
	insert            time.Duration // the INSERT ... SELECT and its commit
	afterCommit       time.Duration // from the commit until JetStream acked every row
	peakUse, peakLive uint64
	spillPeak         int64 // the reader's spill files (protocol 2)
}

// The negative control of TestBigTransaction: a publish hook (a fake: the
// real reader cannot be made to hold a transaction on demand) keeps every
// published body referenced until the end, as a reader holding the
// transaction whole would; the same measurement then exceeds the bound.
func TestBigTransactionHeldWholeExceedsBound(t *testing.T) {
	bigTxSetup(t, 0)
	const dataMB = 512 // enough to exceed the bound when held; SLUICE_BIG_TX_MB does not apply
	peakLive := bigTx(t, dataMB, true, 0).peakLive
	if peakLive <= bigTxLiveBound {
		t.Errorf("negative control: a reader holding %d MB whole peaked at %d MiB live, within the bound %d MiB: the measurement cannot tell",
			dataMB, peakLive>>20, bigTxLiveBound>>20)
	}
}

// bigTxSetup skips unless BigTxEnv=1 and returns the MB of row data.
func bigTxSetup(t *testing.T, def int) int {
	if os.Getenv(BigTxEnv) != "1" || testing.Short() {
		t.Skipf("heavy (~2 GB transaction, ~10 GB disk): set %s=1 to run", BigTxEnv)
	}
	if v := os.Getenv(BigTxMBEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number of MB", BigTxMBEnv, v)
		}
		return n
	}
	return def
}

// bigTx inserts dataMB of row data in one transaction, runs the reader
// until JetStream acked every row and returns the peak heap in use and
// the peak live heap over the reader's run (the transaction's insert, while
// protocol 2 streams it, and after its commit). retain keeps every
// published body referenced (the negative control). protocol is
// source.protocol.
func bigTx(t *testing.T, dataMB int, retain bool, protocol int) bigTxResult {
	rows := int64(dataMB) << 20 / bigTxValue
	e := newEnv(t, "public.big")
	e.alloc = memory.DefaultAllocator // what production uses (the checked one keeps a map per buffer)
	e.cfg.Reader.BatchBytes = bigTxBatchBytes
	e.cfg.Reader.BatchRows = 1 << 20 // batch_bytes cuts, not rows
	e.cfg.Reader.MaxInFlight = bigTxInFlight
	e.cfg.Reader.StatusInterval = 100 * time.Millisecond
	e.cfg.NATS.MaxBytes = 4 << 30 // CHANGES holds the whole transaction
	e.cfg.Source.Protocol = protocol
	ctx := context.Background()
	if err := natsx.EnsureStreams(ctx, e.js, e.cfg); err != nil {
		t.Fatal(err)
	}
	e.exec(`CREATE TABLE big (tenant_id text, id bigint, body text, PRIMARY KEY (tenant_id, id))`)
	var held [][]byte
	var heldMu sync.Mutex
	run := e.start(e.newReader("big", func(r *Reader) {
		if !retain {
			return
		}
		r.publishHook = func(real capture.PublishFunc) capture.PublishFunc {
			return func(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
				heldMu.Lock()
				held = append(held, msg.Data)
				heldMu.Unlock()
				return real(msg, opts...)
			}
		}
	}))
	waitStreaming(t, run)

	// The transaction: one INSERT ... SELECT, committed once.
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	walStart := currentLSN(t, e.dsn)
	// The reader's run, from the transaction's first change until JetStream
	// acked every row, under the memory limit and the sampler.
	runtime.GC()
	old := debug.SetMemoryLimit(bigTxMemLimit)
	defer debug.SetMemoryLimit(old)
	hs := startHeapSampler()
	var spillPeak atomic.Int64
	stopSpill := make(chan struct{})
	spillDone := make(chan struct{})
	var stopOnce sync.Once
	stopSpiller := func() { stopOnce.Do(func() { close(stopSpill); <-spillDone }) }
	defer stopSpiller()
	go func() {
		defer close(spillDone)
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			if b := run.r.Status().SpillBytes; b > spillPeak.Load() {
				spillPeak.Store(b)
			}
			select {
			case <-stopSpill:
				return
			case <-tk.C:
			}
		}
	}()
	t0 := time.Now()
	if _, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO big SELECT 't' || mod(g, 50), g, repeat(md5(g::text), 31)
		FROM generate_series(1, %d) g`, rows)); err != nil {
		hs.finish()
		t.Fatalf("inserting the big transaction: %v", err)
	}
	insertTook := time.Since(t0)
	walMB := float64(currentLSN(t, e.dsn)-walStart) / (1 << 20)
	t.Logf("protocol %d: inserted %d rows (%d MB of row data, %.0f MB of WAL) in one transaction in %s; the reader spilled %.0f MB before the commit",
		protocol, rows, rows*bigTxValue>>20, walMB, insertTook.Round(time.Millisecond), float64(spillPeak.Load())/(1<<20))
	t1 := time.Now()
	deadline := t1.Add(30 * time.Minute)
	tk := time.NewTicker(20 * time.Millisecond)
	lastLog := t1
	for got := int64(0); got < rows; got = run.r.Status().Rows["public.big"] {
		if time.Now().After(deadline) {
			hs.finish()
			t.Fatalf("reader acked %d of %d rows in 30m", got, rows)
		}
		if st := run.r.Status(); st.LastError != "" || len(st.Halted) > 0 {
			hs.finish()
			t.Fatalf("reader failed: %q halted %v", st.LastError, st.Halted)
		}
		if time.Since(lastLog) > 30*time.Second {
			lastLog = time.Now()
			t.Logf("  %d/%d rows acked after %s", got, rows, time.Since(t1).Round(time.Second))
		}
		<-tk.C
	}
	took := time.Since(t1)
	tk.Stop()
	peakUse, peakLive, samples := hs.finish()
	stopSpiller()
	run.stop(t)
	heldMu.Lock()
	held = nil
	heldMu.Unlock()

	// Every row is in CHANGES: count Sluice-Rows from the headers only.
	msgs, counted, bodyBytes := countChanges(t, e, proto.ChangesSubject("public.big"))
	if counted != rows {
		t.Fatalf("CHANGES holds %d rows of public.big in %d messages, want %d", counted, msgs, rows)
	}
	mb := float64(bodyBytes) / (1 << 20)
	t.Logf("reader: %d rows, %d messages, %.0f MB of Arrow bodies (%.0f MB WAL) in %s: %.0f rows/s, %.1f MB/s Arrow, %.1f MB/s WAL",
		rows, msgs, mb, walMB, took.Round(time.Millisecond), float64(rows)/took.Seconds(), mb/took.Seconds(), walMB/took.Seconds())
	t.Logf("heap (%d samples every 50ms): peak live %.0f MiB (bound %d MiB = 3 x %d in flight x %d MiB + %d MiB); peak in use %.0f MiB (memory limit %d MiB); transaction %d MB",
		samples, float64(peakLive)/(1<<20), bigTxLiveBound>>20, bigTxInFlight, bigTxBatchBytes>>20, bigTxOverhead>>20,
		float64(peakUse)/(1<<20), bigTxMemLimit>>20, rows*bigTxValue>>20)
	return bigTxResult{protocol: protocol, dataMB: rows * bigTxValue >> 20, walMB: walMB, insert: insertTook, afterCommit: took,
		peakUse: peakUse, peakLive: peakLive, spillPeak: spillPeak.Load()}
}

// countChanges reads the headers (no bodies) of every message on subject
// and sums Sluice-Rows and the body sizes.
func countChanges(t *testing.T, e *env, subject string) (msgs int, rows, bodyBytes int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := e.js.Stream(ctx, proto.StreamChanges)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	want := int(info.State.Subjects[subject])
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, HeadersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for msgs < want {
		batch, err := cons.Fetch(min(want-msgs, 500), jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			h := m.Headers()
			r, err := strconv.ParseInt(h.Get(proto.HeaderRows), 10, 64)
			if err != nil {
				t.Fatalf("message %s: Sluice-Rows %q", h.Get(proto.HeaderMsgID), h.Get(proto.HeaderRows))
			}
			size, _ := strconv.ParseInt(h.Get(nats.MsgSize), 10, 64)
			rows += r
			bodyBytes += size
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("read %d of %d messages: no more", msgs, want)
		}
		msgs += n
	}
	return msgs, rows, bodyBytes
}
