package natsx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
)

func newConsumer(t *testing.T, e *testJS, name string, ackWait time.Duration) jetstream.Consumer {
	t.Helper()
	cons, err := e.js.CreateOrUpdateConsumer(ctxT(t), proto.StreamChanges, jetstream.ConsumerConfig{
		Durable:       name,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		FilterSubject: proto.SubjectChangesAll,
		MaxDeliver:    -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// runConsume runs Consume in an owned goroutine; the returned stop cancels
// it and waits for it to return.
func runConsume(t *testing.T, cons jetstream.Consumer, h Handler, opts ConsumeOptions) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var g errgroup.Group
	g.Go(func() error { return Consume(ctx, cons, h, opts) })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := g.Wait(); err != nil {
				t.Errorf("Consume returned %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func publish(t *testing.T, e *testJS, subject, id string, data []byte, hdr nats.Header) {
	t.Helper()
	if hdr == nil {
		hdr = nats.Header{}
	}
	hdr.Set(proto.HeaderMsgID, id)
	if _, err := PublishSync(ctxT(t), e.js, &nats.Msg{Subject: subject, Data: data, Header: hdr}); err != nil {
		t.Fatal(err)
	}
}

func consumerInfo(t *testing.T, cons jetstream.Consumer) *jetstream.ConsumerInfo {
	t.Helper()
	ci, err := cons.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return ci
}

func dlqMessages(t *testing.T, e *testJS) []*jetstream.RawStreamMsg {
	t.Helper()
	st, err := e.js.Stream(ctxT(t), proto.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctxT(t), seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func TestConsumeClassifier(t *testing.T) {
	e := startJS(t)
	reg := prometheus.NewRegistry()
	cons := newConsumer(t, e, "router", 30*time.Second)

	var (
		mu      sync.Mutex
		calls   = map[string]int{}
		flakyOK = make(chan struct{})
	)
	h := func(ctx context.Context, msg jetstream.Msg) error {
		kind := msg.Headers().Get("Test-Kind")
		mu.Lock()
		calls[kind]++
		n := calls[kind]
		mu.Unlock()
		switch kind {
		case "ok":
			return nil
		case "flaky":
			if n < 3 {
				return fmt.Errorf("transient failure %d", n)
			}
			close(flakyOK)
			return nil
		case "poison":
			return Permanent(errors.New("poison row\r\nwith a newline"))
		case "decode":
			_, err := arrowcodec.Decode([]byte("not arrow"), nil)
			return fmt.Errorf("decoding batch: %w", err)
		case "panic":
			var m map[string]int
			m["boom"]++ // nil map write: a real runtime panic
			return nil
		}
		return fmt.Errorf("unexpected kind %q", kind)
	}
	stop := runConsume(t, cons, h, ConsumeOptions{Stage: "router", DLQ: NewDeadLetter(e.js, "router"), Metrics: reg, Log: discard, Fetch: 4, MaxWait: 500 * time.Millisecond})

	subj := proto.ChangesSubject("public.orders")
	for _, k := range []string{"ok", "flaky", "poison", "decode", "panic"} {
		publish(t, e, subj, "id-"+k, []byte("body-"+k), nats.Header{"Test-Kind": {k}, proto.HeaderWire: {proto.WireVersion}})
	}
	// Unknown wire major: dead-lettered without reaching the handler.
	publish(t, e, subj, "id-wire", []byte("body-wire"), nats.Header{"Test-Kind": {"wire"}, proto.HeaderWire: {"2.0"}})

	eventually(t, 20*time.Second, "every message settled", func() bool {
		ci := consumerInfo(t, cons)
		return ci.AckFloor.Stream == 6 && ci.NumAckPending == 0 && ci.NumPending == 0
	})
	<-flakyOK
	stop()

	mu.Lock()
	if calls["flaky"] != 3 || calls["ok"] != 1 || calls["poison"] != 1 || calls["wire"] != 0 {
		t.Errorf("calls = %v", calls)
	}
	mu.Unlock()

	dlq := dlqMessages(t, e)
	if len(dlq) != 4 {
		t.Fatalf("DLQ holds %d messages, want 4 (poison, decode, panic, wire)", len(dlq))
	}
	byKind := map[string]*jetstream.RawStreamMsg{}
	for _, m := range dlq {
		byKind[m.Header.Get("Test-Kind")] = m
		if m.Subject != proto.DLQSubject("router") {
			t.Errorf("dead letter on %s", m.Subject)
		}
		if m.Header.Get(proto.HeaderStage) != "router" || m.Header.Get(proto.HeaderOrigSubject) != subj ||
			m.Header.Get(proto.HeaderOrigStream) != proto.StreamChanges {
			t.Errorf("dead letter headers: %v", m.Header)
		}
		seq, _ := strconv.ParseUint(m.Header.Get(proto.HeaderOrigSeq), 10, 64)
		if got, want := m.Header.Get(proto.HeaderMsgID), proto.DLQMsgID("router", proto.StreamChanges, seq); got != want {
			t.Errorf("dead letter msg id %q, want %q", got, want)
		}
		if !strings.HasPrefix(m.Header.Get(HeaderOrigMsgID), "id-") {
			t.Errorf("original msg id not kept: %v", m.Header)
		}
	}
	if p := byKind["poison"]; p == nil || string(p.Data) != "body-poison" || p.Header.Get(proto.HeaderReason) != "poison row  with a newline" {
		t.Errorf("poison dead letter: %+v", p)
	}
	if p := byKind["panic"]; p == nil || !strings.Contains(p.Header.Get(proto.HeaderReason), "handler panicked") {
		t.Errorf("panic dead letter: %+v", p)
	}
	if p := byKind["wire"]; p == nil || !strings.Contains(p.Header.Get(proto.HeaderReason), "unsupported wire version") {
		t.Errorf("wire dead letter: %+v", p)
	}
	if p := byKind["decode"]; p == nil || !strings.Contains(p.Header.Get(proto.HeaderReason), "decoding arrow message") {
		t.Errorf("decode dead letter: %+v", p)
	}

	for outcome, want := range map[string]float64{OutcomeAck: 2, OutcomeNak: 2, OutcomeDLQ: 4, OutcomeTerm: 4} {
		if got := testutil.ToFloat64(newConsumeMetrics(reg).messages.WithLabelValues("router", outcome)); got != want {
			t.Errorf("outcome %s counted %v, want %v", outcome, got, want)
		}
	}
}

func TestConsumeManualAck(t *testing.T) {
	e := startJS(t)
	cons := newConsumer(t, e, "manual", 30*time.Second)
	held := make(chan jetstream.Msg, 4)
	var viaErr atomic.Bool
	h := func(ctx context.Context, msg jetstream.Msg) error {
		held <- msg
		if viaErr.Swap(true) {
			return fmt.Errorf("buffered: %w", ErrManualAck)
		}
		return nil
	}
	runConsume(t, cons, h, ConsumeOptions{Stage: "flusher", ManualAck: true, Log: discard, MaxWait: 200 * time.Millisecond})
	publish(t, e, proto.ChangesSubject("public.a"), "m1", []byte("1"), nil)
	publish(t, e, proto.ChangesSubject("public.a"), "m2", []byte("2"), nil)
	m1, m2 := <-held, <-held
	ci := consumerInfo(t, cons)
	if ci.NumAckPending != 2 {
		t.Fatalf("ack pending = %d, want 2 (Consume must not ack)", ci.NumAckPending)
	}
	_ = m1.Ack()
	_ = m2.Ack()
	eventually(t, 5*time.Second, "manual acks", func() bool { return consumerInfo(t, cons).NumAckPending == 0 })
}

// The safety rule: a permanent failure is terminated only after its dead
// letter is stored. When the DLQ cannot store it (here: the DLQ stream does
// not exist, so the publish gets no responders — a real fault, no fake), the
// message is naked and redelivered, never lost. The negative control flips
// unsafeTermOnDLQFailure and shows the test detects the loss.
func TestPermanentNeverLostWhenDLQFails(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		t.Run(fmt.Sprintf("unsafe=%v", unsafe), func(t *testing.T) {
			lost := permanentLost(t, unsafe)
			if !unsafe && lost {
				t.Fatal("a permanent failure was terminated although its dead letter was never stored")
			}
			if unsafe && !lost {
				t.Fatal("negative control: with the rule switched off the test must detect the loss")
			}
		})
	}
}

func permanentLost(t *testing.T, unsafe bool) (lost bool) {
	e := startJS(t)
	unsafeTermOnDLQFailure = unsafe
	t.Cleanup(func() { unsafeTermOnDLQFailure = false })
	ctx := ctxT(t)
	if err := e.js.DeleteStream(ctx, proto.StreamDLQ); err != nil {
		t.Fatal(err)
	}
	cons := newConsumer(t, e, "router", 30*time.Second)
	var attempts atomic.Int32
	h := func(ctx context.Context, msg jetstream.Msg) error {
		attempts.Add(1)
		return Permanent(errors.New("poison"))
	}
	stop := runConsume(t, cons, h, ConsumeOptions{Stage: "router", DLQ: NewDeadLetter(e.js, "router"), DLQTimeout: 300 * time.Millisecond, Log: discard, MaxWait: 200 * time.Millisecond})
	publish(t, e, proto.ChangesSubject("public.a"), "p1", []byte("poison"), nil)
	eventually(t, 10*time.Second, "first attempt", func() bool { return attempts.Load() >= 1 })
	// Give the loop its DLQ attempt, then restore the DLQ stream.
	eventually(t, 10*time.Second, "first settlement", func() bool {
		ci := consumerInfo(t, cons)
		return ci.NumAckPending == 0 || ci.NumRedelivered > 0 || ci.AckFloor.Stream == 1
	})
	if err := EnsureStreams(ctx, e.js, e.cfg); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n := len(dlqMessages(t, e)); n == 1 {
			stop()
			return false
		}
		ci := consumerInfo(t, cons)
		if ci.AckFloor.Stream == 1 && len(dlqMessages(t, e)) == 0 {
			// Terminated and nothing recorded: lost.
			stop()
			return true
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
	stop()
	t.Fatalf("neither dead-lettered nor terminated: attempts %d", attempts.Load())
	return false
}

// In-progress acks keep a slow message from being redelivered to another
// replica sharing the durable consumer; the negative control
// (InProgressEvery 0) shows the redelivery happens without them.
func TestInProgressKeepsSlowMessageAlive(t *testing.T) {
	if testing.Short() {
		t.Skip("waits several AckWait periods")
	}
	const ackWait = time.Second // generous: in-progress acks must beat it on a loaded 2-core machine
	for _, every := range []time.Duration{100 * time.Millisecond, 0} {
		t.Run(fmt.Sprintf("every=%s", every), func(t *testing.T) {
			e := startJS(t)
			cons := newConsumer(t, e, "slow", ackWait)
			var calls atomic.Int32
			redelivered := make(chan struct{})
			h := func(ctx context.Context, msg jetstream.Msg) error {
				if calls.Add(1) > 1 {
					close(redelivered) // only the first call holds; a second is a redelivery
					return fmt.Errorf("duplicate: %w", ErrManualAck)
				}
				// Slow work: hold the message for 3 AckWait periods or until
				// another replica receives it.
				select {
				case <-redelivered:
				case <-time.After(3 * ackWait):
				}
				return nil
			}
			opts := ConsumeOptions{Stage: "flusher", InProgressEvery: every, Fetch: 1, MaxWait: 100 * time.Millisecond, Log: discard}
			stop1 := runConsume(t, cons, h, opts)
			stop2 := runConsume(t, cons, h, opts) // a second replica
			publish(t, e, proto.ChangesSubject("public.a"), "slow1", []byte("x"), nil)
			eventually(t, 10*time.Second, "acked", func() bool {
				ci := consumerInfo(t, cons)
				return ci.AckFloor.Stream == 1
			})
			stop1()
			stop2()
			got := calls.Load() > 1
			if every > 0 && got {
				t.Fatal("message redelivered although in-progress acks were sent")
			}
			if every == 0 && !got {
				t.Fatal("negative control: without in-progress acks the message should have been redelivered")
			}
		})
	}
}

func TestConsumeStopsOnCancelAndNaksRest(t *testing.T) {
	e := startJS(t)
	cons := newConsumer(t, e, "stop", 30*time.Second)
	for i := range 5 {
		publish(t, e, proto.ChangesSubject("public.a"), "s"+strconv.Itoa(i), []byte("x"), nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int32
	h := func(hctx context.Context, msg jetstream.Msg) error {
		if handled.Add(1) == 2 {
			cancel()
			<-hctx.Done()
			return hctx.Err()
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- Consume(ctx, cons, h, ConsumeOptions{Stage: "router", Fetch: 5, Log: discard}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return after cancel")
	}
	// One acked; the rest were naked, so another loop gets them at once,
	// long before the 30s AckWait would have redelivered them.
	var again atomic.Int32
	runConsume(t, cons, func(context.Context, jetstream.Msg) error { again.Add(1); return nil }, ConsumeOptions{Stage: "router", MaxWait: 200 * time.Millisecond})
	eventually(t, 5*time.Second, "naked messages redelivered and acked", func() bool {
		ci := consumerInfo(t, cons)
		return ci.AckFloor.Stream == 5 && ci.NumAckPending == 0
	})
	if again.Load() != 4 {
		t.Errorf("second loop handled %d messages, want 4", again.Load())
	}
}
