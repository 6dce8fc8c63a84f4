package natsx

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
)

// fetchN fetches exactly n messages through Fetch.
func fetchN(t *testing.T, cons jetstream.Consumer, n int) []jetstream.Msg {
	t.Helper()
	var out []jetstream.Msg
	for deadline := time.Now().Add(10 * time.Second); len(out) < n && time.Now().Before(deadline); {
		b, err := Fetch(cons, n-len(out), 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			out = append(out, m)
		}
		if err := FetchErr(b); err != nil {
			t.Fatal(err)
		}
	}
	if len(out) != n {
		t.Fatalf("fetched %d messages, want %d", len(out), n)
	}
	return out
}

// TestSettlerOutsideConsume: a stage that acks messages itself settles its
// failures through a Settler used from several goroutines: a permanent
// failure is dead-lettered with its reason cleaned and capped and then
// terminated; transient failures are naked (redelivered) and logged once
// for the run, not once per message.
func TestSettlerOutsideConsume(t *testing.T) {
	e := startJS(t)
	cons := newConsumer(t, e, "settler", 30*time.Second)
	for i := range 9 {
		publish(t, e, proto.ChangesSubject("public.a"), "st"+string(rune('a'+i)), []byte("x"), nil)
	}
	var logs syncBuf
	s := NewSettler(SettleOptions{Stage: "indexer", DLQ: NewDeadLetter(e.js, "indexer"),
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	msgs := fetchN(t, cons, 9)

	long := "bad\r\npack " + strings.Repeat("é", 2*MaxReasonLen)
	// The stage adds what it knows of the message to its dead letter
	// (WithHeaders: the indexer's halt headers).
	extra := nats.Header{proto.HeaderPackPath: []string{"a/b/c.arrow"}}
	if got := s.Settle(ctxT(t), msgs[0], Permanent(WithHeaders(errors.New(long), extra))); got != OutcomeTerm {
		t.Fatalf("permanent failure settled as %s, want %s", got, OutcomeTerm)
	}
	var wg sync.WaitGroup
	for _, m := range msgs[1:] {
		wg.Go(func() {
			if got := s.Settle(ctxT(t), m, errors.New("catalog unavailable")); got != OutcomeNak {
				t.Errorf("transient failure settled as %s, want %s", got, OutcomeNak)
			}
		})
	}
	wg.Wait()

	dl := dlqMessages(t, e)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	reason := dl[0].Header.Get(proto.HeaderReason)
	if len(reason) > MaxReasonLen || strings.ContainsAny(reason, "\r\n") || !strings.HasPrefix(reason, "bad  pack") {
		t.Fatalf("dead letter reason not cleaned and capped: %d bytes, %q…", len(reason), reason[:min(len(reason), 20)])
	}
	if got := dl[0].Header.Get(proto.HeaderPackPath); got != "a/b/c.arrow" {
		t.Fatalf("dead letter header %s = %q, want the one WithHeaders gave", proto.HeaderPackPath, got)
	}
	if n := strings.Count(logs.String(), "handler failing"); n != 1 {
		t.Fatalf("a run of 8 transient failures logged %d times, want once:\n%s", n, logs.String())
	}
	// The naked messages come back (first after at least a backoff's
	// half, 50ms); the terminated one never does.
	again := fetchN(t, cons, 8)
	for _, m := range again {
		if d := Delivered(m); d != 2 {
			t.Fatalf("redelivered message has delivery count %d, want 2", d)
		}
		if s.Settle(context.Background(), m, nil) != OutcomeAck {
			t.Fatal("nil error not acked")
		}
	}
	eventually(t, 5*time.Second, "every message settled", func() bool {
		ci := consumerInfo(t, cons)
		return ci.NumAckPending == 0 && ci.NumPending == 0
	})
	if !strings.Contains(logs.String(), "handler recovered") {
		t.Fatal("an ack after the failing run did not log the recovery")
	}
}
