package natsx

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/shared/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type testJS struct {
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg config.Config
}

// startJS runs a real embedded JetStream server on a random port with a
// t.TempDir() store, connects, and provisions the streams.
func startJS(t *testing.T) *testJS { return startJSB(t) }

func startJSB(t testing.TB) *testJS {
	t.Helper()
	cfg := config.Default()
	cfg.NATS.MaxPayload = 1 << 20
	cfg.NATS.MaxBytes = 256 << 20
	s, err := StartEmbedded(EmbeddedOptions{StoreDir: t.TempDir(), MaxPayload: int32(cfg.NATS.MaxPayload)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, js, err := Connect(ctx, cfg.NATS, s.ClientURL(), "natsx-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	return &testJS{srv: s, nc: nc, js: js, cfg: cfg}
}

// eventually retries cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval of the retry helper, not a wait for an outcome
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var discard = slog.New(slog.DiscardHandler)
