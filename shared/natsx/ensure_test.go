package natsx

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/config"
)

// TestEnsureStreamsLeavesUnchanged: provisioning streams that already have
// their configuration sends no update (on a cluster an update needs the
// meta leader and each stream's leader: a service restarting while one
// stream has lost its quorum must not fail on a change it does not make);
// a changed limit is still applied. The negative control
// (ensureUnsafeAlwaysUpdate) updates every stream every time.
func TestEnsureStreamsLeavesUnchanged(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		e := startJS(t)
		ctx := ctxT(t)
		var updates atomic.Int64
		sub, err := e.nc.Subscribe("$JS.API.STREAM.UPDATE.>", func(*nats.Msg) { updates.Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		if err := e.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		ensureUnsafeAlwaysUpdate = unsafe
		err = EnsureStreams(ctx, e.js, e.cfg)
		ensureUnsafeAlwaysUpdate = false
		if err != nil {
			t.Fatal(err)
		}
		_ = e.nc.Flush()
		if unsafe {
			if updates.Load() == 0 {
				t.Fatal("negative control: every stream updated, yet no update seen: the test cannot tell")
			}
			t.Logf("negative control: %d updates of unchanged streams", updates.Load())
			_ = sub.Unsubscribe()
			continue
		}
		if n := updates.Load(); n != 0 {
			t.Fatalf("%d updates of streams whose configuration already matches", n)
		}
		cfg := e.cfg
		cfg.NATS.MaxAge = 36 * time.Hour
		if err := EnsureStreams(ctx, e.js, cfg); err != nil {
			t.Fatal(err)
		}
		_ = e.nc.Flush()
		s, err := e.js.Stream(ctx, proto.StreamChanges)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.MaxAge; got != 36*time.Hour || updates.Load() == 0 {
			t.Fatalf("after a max_age change: CHANGES max_age %s, %d updates", got, updates.Load())
		}
		_ = sub.Unsubscribe()
	}
}

// TestEnsureStreamsWaitsForJetStream: started while no server answers
// (the broker down: to a client the same as a NATS cluster without a
// quorum, requests time out), EnsureStreams retries with backoff and
// provisions the streams once a server is back; with a context that ends
// first it says JetStream is unavailable. The negative control
// (ensureUnsafeNoWait) fails at the first timeout, as a service start-up
// did when it met a stream without a leader.
func TestEnsureStreamsWaitsForJetStream(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		e := startJS(t) // for its config
		opts := EmbeddedOptions{StoreDir: t.TempDir(), Port: port, MaxPayload: int32(e.cfg.NATS.MaxPayload)}
		srv, err := StartEmbedded(opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		nc, js, err := Connect(ctx, e.cfg.NATS, srv.ClientURL(), "ensure-wait")
		if err != nil {
			t.Fatal(err)
		}
		srv.Shutdown()
		srv.WaitForShutdown()

		ensureUnsafeNoWait = unsafe
		done := make(chan error, 1)
		go func() { done <- EnsureStreams(ctx, js, e.cfg) }()
		select {
		case err := <-done:
			ensureUnsafeNoWait = false
			if unsafe && err != nil {
				t.Logf("negative control: %v", err)
				nc.Close()
				continue
			}
			t.Fatalf("EnsureStreams returned while no server answered (unsafe %v): %v", unsafe, err)
		case <-time.After(7 * time.Second): // past one attempt's timeout: it is waiting, not failing
		}
		ensureUnsafeNoWait = false
		if unsafe {
			t.Fatal("negative control: EnsureStreams kept waiting without its retry")
		}
		srv, err = StartEmbedded(opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("after the server came back: %v", err)
		}
		if _, err := js.Stream(ctx, proto.StreamChanges); err != nil {
			t.Fatal(err)
		}
		// A context that ends while nothing answers: the error says why.
		srv.Shutdown()
		srv.WaitForShutdown()
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = EnsureStreams(sctx, js, e.cfg)
		cancel()
		if !errors.Is(err, ErrJetStreamUnavailable) {
			t.Fatalf("with no server until the context ended: %v, want ErrJetStreamUnavailable", err)
		}
		t.Logf("no server: %v", err)
		nc.Close()
	}
}

// TestSameStreamConfig: every field StreamConfigs sets is compared, also
// one it does not set today; limits of 0 and -1 are both unlimited.
func TestSameStreamConfig(t *testing.T) {
	want := StreamConfigs(config.Default())[0]
	have := want
	have.MaxMsgs, have.MaxConsumers = -1, -1 // server defaults for fields left zero
	if !sameStreamConfig(have, want) {
		t.Fatal("the same configuration compares different")
	}
	for name, change := range map[string]func(*jetstream.StreamConfig){
		"max_age":     func(c *jetstream.StreamConfig) { c.MaxAge++ },
		"subjects":    func(c *jetstream.StreamConfig) { c.Subjects = []string{"other.>"} },
		"replicas":    func(c *jetstream.StreamConfig) { c.Replicas = 3 },
		"compression": func(c *jetstream.StreamConfig) { c.Compression = jetstream.S2Compression },
		"max_bytes":   func(c *jetstream.StreamConfig) { c.MaxBytes = 1 << 20 },
	} {
		w := want
		change(&w)
		if sameStreamConfig(have, w) {
			t.Errorf("%s: a changed configuration compares the same", name)
		}
	}
	w, h := want, have
	w.MaxBytes, h.MaxBytes = 0, -1
	if !sameStreamConfig(h, w) {
		t.Error("max_bytes 0 (unlimited) and the server's -1 compare different")
	}
}
