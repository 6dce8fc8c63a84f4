package stack

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/config"
)

// A process opens an embedded NATS with the streams provisioned, serves
// /healthz, and on shutdown stops its components one at a time in the order
// given.
func TestServeStopsInPipelineOrder(t *testing.T) {
	cfg := devConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := Open(ctx, cfg, "test", Needs{EmbeddedNATS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	for _, name := range []string{proto.StreamChanges, proto.StreamRouted, proto.StreamPacks, proto.StreamDLQ} {
		if _, err := st.JS.Stream(ctx, name); err != nil {
			t.Fatalf("stream %s not provisioned: %v", name, err)
		}
	}
	var mu sync.Mutex
	var stopped []string
	comp := func(name string) Component {
		return Component{Name: name, Status: func() any { return name }, Run: func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond) // a drain
			mu.Lock()
			stopped = append(stopped, name)
			mu.Unlock()
			return nil
		}}
	}
	done := make(chan error, 1)
	go func() { done <- st.Serve(ctx, []Component{comp("reader"), comp("router"), comp("flusher")}) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + st.HTTP.Addr() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz never answered 200: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := len(stopped); got != 3 || stopped[0] != "reader" || stopped[1] != "router" || stopped[2] != "flusher" {
		t.Fatalf("stopped in order %v, want reader, router, flusher", stopped)
	}
}

// A component that fails stops the process with its error.
func TestServeReturnsAComponentFailure(t *testing.T) {
	cfg := devConfig(t)
	ctx := context.Background()
	st, err := Open(ctx, cfg, "test", Needs{EmbeddedNATS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	boom := errors.New("boom")
	err = st.Serve(ctx, []Component{
		{Name: "bad", Status: func() any { return nil }, Run: func(context.Context) error { return boom }},
		{Name: "good", Status: func() any { return nil }, Run: func(ctx context.Context) error { <-ctx.Done(); return nil }},
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Serve returned %v, want the component's failure", err)
	}
}

// sluice run refuses an embedded NATS: separate processes must share a server.
func TestRunRefusesEmbeddedNATS(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	_, err := Open(context.Background(), cfg, "router", Needs{})
	if err == nil {
		t.Fatal("a single service opened an embedded NATS nobody else can reach")
	}
}

// devConfig is the config of an embedded stack on free loopback ports in
// a fresh data_dir.
func devConfig(t *testing.T) config.Config {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.NATS.Listen, cfg.NATS.Monitor = "127.0.0.1:0", ""
	cfg.Telemetry.LogLevel = "error"
	return cfg
}
