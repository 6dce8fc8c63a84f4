package natsx

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sluice-cdc/sluice/shared/config"
)

// TestResetPendingAfterRestart: messages delivered and not acked before
// the embedded server restarted (the process that fetched them died) are
// delivered again at once after ResetPending, long before AckWait; the ack
// floor does not move, and a consumer with nothing pending is left alone.
// The control: the same restart without ResetPending delivers nothing
// within the same wait.
func TestResetPendingAfterRestart(t *testing.T) {
	for _, reset := range []bool{true, false} {
		name := "reset"
		if !reset {
			name = "control-no-reset"
		}
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			dir := t.TempDir()
			cfg := config.Default()
			start := func() (func(), jetstream.JetStream) {
				s, err := StartEmbedded(EmbeddedOptions{StoreDir: dir, MaxPayload: 1 << 20})
				if err != nil {
					t.Fatal(err)
				}
				nc, js, err := Connect(ctx, cfg.NATS, s.ClientURL(), "reset-test")
				if err != nil {
					t.Fatal(err)
				}
				return func() { nc.Close(); s.Shutdown(); s.WaitForShutdown() }, js
			}
			stop, js := start()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
				t.Fatal(err)
			}
			for _, c := range []string{"busy", "idle"} {
				if _, err := js.CreateOrUpdateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: c, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute}); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 5; i++ {
				if _, err := js.Publish(ctx, "t.x", []byte{byte(i)}); err != nil {
					t.Fatal(err)
				}
			}
			busy, _ := js.Consumer(ctx, "T", "busy")
			got := fetchSeqs(t, busy, 5, time.Second, func(m jetstream.Msg, seq uint64) {
				if seq == 1 {
					_ = m.DoubleAck(ctx)
				}
			})
			if len(got) != 5 {
				t.Fatalf("first delivery: %v", got)
			}
			idle, _ := js.Consumer(ctx, "T", "idle")
			fetchSeqs(t, idle, 5, time.Second, func(m jetstream.Msg, _ uint64) { _ = m.DoubleAck(ctx) })
			stop() // the fetching process is gone; its deliveries stay pending

			stop, js = start()
			defer stop()
			if reset {
				names, err := ResetPending(ctx, js)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(names, []string{"T/busy"}) {
					t.Fatalf("reset %v, want [T/busy] (idle has nothing pending)", names)
				}
			}
			busy, _ = js.Consumer(ctx, "T", "busy")
			again := fetchSeqs(t, busy, 5, 2*time.Second, nil)
			want := []uint64{2, 3, 4, 5}
			if !reset {
				want = nil
			}
			if !slices.Equal(again, want) {
				t.Fatalf("delivered after the restart within 2s: %v, want %v (AckWait is 1m)", again, want)
			}
			info, err := busy.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.AckFloor.Stream != 1 {
				t.Fatalf("ack floor %d, want 1 (a reset never moves it)", info.AckFloor.Stream)
			}
		})
	}
}

// fetchSeqs fetches up to n messages within wait and returns their stream
// sequences, calling each (when set) on every message.
func fetchSeqs(t *testing.T, c jetstream.Consumer, n int, wait time.Duration, each func(jetstream.Msg, uint64)) []uint64 {
	t.Helper()
	batch, err := c.Fetch(n, jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, md.Sequence.Stream)
		if each != nil {
			each(m, md.Sequence.Stream)
		}
	}
	return out
}
