package httpx

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run starts s on a real listener and returns its base URL; cleanup stops
// it and checks Run returned nil.
func run(t *testing.T, s *Server) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var g errgroup.Group
	g.Go(func() error { return s.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		if err := g.Wait(); err != nil {
			t.Errorf("Run: %v", err)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	addr := s.Addr()
	if addr == "" {
		t.Fatal("no address")
	}
	return "http://" + addr
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpointsAndAuth(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_test_things_total", Help: "x"})
	reg.MustRegister(c)
	c.Add(3)
	s := New("127.0.0.1:0", "tok3n", reg, nil)
	s.Handle("GET /api/v1/status", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	s.Handle("/ui", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ui")) }))
	base := run(t, s)

	if code, body := get(t, base+"/healthz", ""); code != 200 || body != "ok" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, _ := get(t, base+"/readyz", ""); code != 200 {
		t.Errorf("/readyz = %d", code)
	}
	if code, body := get(t, base+"/metrics", "tok3n"); code != 200 || !strings.Contains(body, "sluice_test_things_total 3") {
		t.Errorf("/metrics = %d %q", code, body)
	}
	for _, p := range []string{"/api/v1/status", "/ui", "/metrics"} {
		if code, _ := get(t, base+p, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without token = %d, want 401", p, code)
		}
		if code, _ := get(t, base+p, "wrong"); code != http.StatusUnauthorized {
			t.Errorf("%s with wrong token = %d, want 401", p, code)
		}
		if code, _ := get(t, base+p, "tok3n"); code != 200 {
			t.Errorf("%s with token = %d, want 200", p, code)
		}
	}
	// Unknown paths are also behind the token (no probing without it).
	if code, _ := get(t, base+"/nope", ""); code != http.StatusUnauthorized {
		t.Errorf("/nope without token = %d", code)
	}
	if code, _ := get(t, base+"/nope", "tok3n"); code != http.StatusNotFound {
		t.Errorf("/nope with token = %d", code)
	}
}

func TestNoTokenOnLoopbackMeansOpen(t *testing.T) {
	s := New("127.0.0.1:0", "", nil, nil)
	s.Handle("GET /api/v1/x", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	base := run(t, s)
	if code, _ := get(t, base+"/api/v1/x", ""); code != 200 {
		t.Fatalf("open server refused: %d", code)
	}
}

func TestReadyChecks(t *testing.T) {
	s := New("127.0.0.1:0", "", nil, nil)
	var natsOK, pgOK atomic.Bool
	s.AddReadyCheck("nats", func(context.Context) error {
		if natsOK.Load() {
			return nil
		}
		return errors.New("down")
	})
	s.AddReadyCheck("postgres", func(context.Context) error {
		if pgOK.Load() {
			return nil
		}
		return errors.New("down")
	})
	base := run(t, s)
	code, body := get(t, base+"/readyz", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "nats, postgres") {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	natsOK.Store(true)
	if code, body := get(t, base+"/readyz", ""); code != 503 || strings.Contains(body, "nats") || !strings.Contains(body, "postgres") {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	pgOK.Store(true)
	if code, _ := get(t, base+"/readyz", ""); code != 200 {
		t.Fatalf("/readyz = %d", code)
	}
}

func TestGracefulShutdown(t *testing.T) {
	s := New("127.0.0.1:0", "", nil, nil)
	started := make(chan struct{})
	release := make(chan struct{})
	s.Handle("GET /slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		_, _ = w.Write([]byte("done"))
	}))
	ctx, cancel := context.WithCancel(context.Background())
	var g errgroup.Group
	g.Go(func() error { return s.Run(ctx) })
	base := "http://" + s.Addr()
	got := make(chan string, 1)
	g.Go(func() error {
		resp, err := http.Get(base + "/slow")
		if err != nil {
			got <- err.Error()
			return nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
		return nil
	})
	<-started
	cancel() // shutdown begins while a request is in flight
	close(release)
	if body := <-got; body != "done" {
		t.Fatalf("in-flight request got %q", body)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections()
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("server still serving after shutdown")
	}
}

func TestBindError(t *testing.T) {
	a := New("127.0.0.1:0", "", nil, nil)
	base := run(t, a)
	b := New(strings.TrimPrefix(base, "http://"), "", nil, nil)
	if b.Addr() != "" {
		t.Fatal("second bind on the same port succeeded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := b.Run(ctx); err == nil {
		t.Fatal("Run on a taken port returned nil")
	}
}
