package httpx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ShutdownTimeout bounds the graceful shutdown of Run.
const ShutdownTimeout = 5 * time.Second

// ReadyCheckTimeout bounds each ready check.
const ReadyCheckTimeout = 2 * time.Second

type readyCheck struct {
	name string
	f    func(context.Context) error
}

// Server is a service's HTTP server.
type Server struct {
	listen   string
	token    string
	insecure bool // serve off loopback without a token (http.insecure_no_auth)
	timeouts Timeouts
	log      *slog.Logger
	mux      *http.ServeMux
	reg      *prometheus.Registry

	tenants atomic.Pointer[tenantCheck] // nil: no tenant tokens (scope.go)

	patMu    sync.Mutex // guards patterns
	patterns []string

	mu     sync.Mutex // guards checks
	checks []readyCheck

	bindOnce sync.Once
	ln       net.Listener
	bindErr  error
}

// Option configures a Server.
type Option func(*Server)

// InsecureNoAuth lets a server without a token listen on a non-loopback
// address (http.insecure_no_auth: true); Run then logs a warning. Without
// it, such a server refuses to start.
func InsecureNoAuth(on bool) Option { return func(s *Server) { s.insecure = on } }

// WithTimeouts replaces APITimeouts (tests use short ones).
func WithTimeouts(t Timeouts) Option { return func(s *Server) { s.timeouts = t } }

// New returns a server that will listen on listen (host:port, port may be
// 0). token, when non-empty, is required as a bearer token on every path but
// /healthz and /readyz. Without a token the server binds only a loopback
// address (unless InsecureNoAuth) and then answers only requests whose Host
// names loopback (see HostGuard). reg is served on /metrics (nil: an empty
// registry). log may be nil.
func New(listen, token string, reg *prometheus.Registry, log *slog.Logger, opts ...Option) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s := &Server{listen: listen, token: token, log: log, mux: http.NewServeMux(), timeouts: APITimeouts, reg: reg}
	for _, o := range opts {
		o(s)
	}
	s.Handle("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	}))
	s.Handle("GET /readyz", http.HandlerFunc(s.readyz))
	s.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return s
}

// Handle registers h for pattern (Go 1.22 ServeMux patterns, e.g.
// "GET /api/v1/status"). Safe to call while the server runs.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
	s.patMu.Lock()
	s.patterns = append(s.patterns, pattern)
	s.patMu.Unlock()
}

// Patterns returns every pattern registered with Handle (its own /healthz,
// /readyz and /metrics included), in the order registered: what a test
// walks so that no route is forgotten.
func (s *Server) Patterns() []string {
	s.patMu.Lock()
	defer s.patMu.Unlock()
	return append([]string(nil), s.patterns...)
}

// HasToken reports whether the server requires an operator token.
func (s *Server) HasToken() bool { return s.token != "" }

// SetTenants lets tenant tokens in (scope.go), from the next request on;
// their outcomes are counted in sluice_http_tenant_requests_total on the
// server's registry. It does nothing on a server without an operator
// token, where a scope would restrict nothing, and returns whether it
// took effect.
func (s *Server) SetTenants(t Tenants) bool {
	if s.token == "" || t.Verify == nil || t.Allow == nil || t.Prefix == "" {
		return false
	}
	s.tenants.Store(&tenantCheck{t: t, route: s.route, counted: newTenantCounter(s.reg)})
	return true
}

// route is the pattern the mux serves r with ("" for none: a 404 or 405).
func (s *Server) route(r *http.Request) string {
	_, pattern := s.mux.Handler(r)
	return pattern
}

// AddReadyCheck registers a check /readyz runs; the server is ready when
// every check returns nil.
func (s *Server) AddReadyCheck(name string, f func(context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks = append(s.checks, readyCheck{name: name, f: f})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	checks := append([]readyCheck(nil), s.checks...)
	s.mu.Unlock()
	var failing []string
	for _, c := range checks {
		ctx, cancel := context.WithTimeout(r.Context(), ReadyCheckTimeout)
		err := c.f(ctx)
		cancel()
		if err != nil {
			failing = append(failing, c.name)
			s.log.DebugContext(r.Context(), "ready check failing", "check", c.name, "error", err)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if len(failing) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready: %s\n", strings.Join(failing, ", "))
		return
	}
	_, _ = w.Write([]byte("ok"))
}

func (s *Server) bind() error {
	s.bindOnce.Do(func() {
		ln, err := net.Listen("tcp", s.listen)
		if err != nil {
			s.bindErr = fmt.Errorf("listening on %s: %w", s.listen, err)
			return
		}
		if err := CheckListen(ln.Addr(), s.token, s.insecure, s.log); err != nil {
			_ = ln.Close()
			s.bindErr = err
			return
		}
		s.ln = ln
	})
	return s.bindErr
}

// Addr returns the bound address (binding the listener if Run has not yet),
// or "" when the address cannot be bound (Run then returns the error).
func (s *Server) Addr() string {
	if s.bind() != nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Handler returns the server's full handler (token or Host guard, and
// logging).
func (s *Server) Handler() http.Handler {
	return s.logRequests(protect(s.mux, s.token, s.insecure, open, s.tenants.Load))
}

// Run serves until ctx is cancelled, then shuts down gracefully within
// ShutdownTimeout. It returns nil on a clean shutdown.
func (s *Server) Run(ctx context.Context) error {
	if err := s.bind(); err != nil {
		return err
	}
	srv := NewHTTPServer(s.Handler(), s.timeouts, s.log)
	srv.BaseContext = func(net.Listener) context.Context { return context.WithoutCancel(ctx) }
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.ln) }()
	s.log.Info("http server listening", "addr", s.ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("serving http on %s: %w", s.ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		_ = srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("shutting down http server: %w", err)
	}
	return nil
}

// open is what a token does not guard: liveness and readiness probes.
// /metrics is behind the token when one is set (Prometheus sends it with
// authorization.credentials_file).
func open(path string) bool {
	return path == "/healthz" || path == "/readyz"
}

type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

// Flush lets streaming handlers flush through the wrapper.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap exposes the underlying writer to http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.log.Enabled(r.Context(), slog.LevelDebug) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		s.log.DebugContext(r.Context(), "http request", "method", r.Method, "path", r.URL.Path,
			"status", sw.status, "bytes", sw.bytes, "duration", time.Since(start))
	})
}
