package httpx

import (
	"bufio"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Timeouts bound what one connection may hold of a server. Every sluice
// HTTP server (the API and /metrics of every process, `catalog serve`) is
// built by NewHTTPServer with them; none is ever unbounded.
type Timeouts struct {
	// ReadHeader bounds reading a request's headers (a slowloris client
	// that trickles them is cut off).
	ReadHeader time.Duration
	// Read bounds reading the whole request, body included.
	Read time.Duration
	// WriteStall bounds each write of a response, not the response: a
	// streaming response (an export) may take as long as it needs while it
	// makes progress, but a client that stops reading is cut off once one
	// write has waited this long. The time a handler computes before it
	// writes does not count (http.Server's WriteTimeout would count it and
	// cut a long query or export).
	WriteStall time.Duration
	// Idle bounds how long a keep-alive connection waits for its next
	// request.
	Idle time.Duration
}

// APITimeouts are those of the API and /metrics servers (httpx.Server):
// requests are small, responses may stream.
var APITimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: time.Minute, WriteStall: time.Minute, Idle: 2 * time.Minute}

// CatalogTimeouts are those of `sluice catalog serve`: a request may carry
// a query of up to 16 MiB.
var CatalogTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 5 * time.Minute, WriteStall: 2 * time.Minute, Idle: 2 * time.Minute}

// NewHTTPServer returns an http.Server for h with every timeout of t set;
// a zero field of t takes APITimeouts' value, so no bound is ever off.
// errLog, when non-nil, receives the server's own errors at debug level.
func NewHTTPServer(h http.Handler, t Timeouts, errLog *slog.Logger) *http.Server {
	def := APITimeouts
	pick := func(v, d time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return d
	}
	t = Timeouts{
		ReadHeader: pick(t.ReadHeader, def.ReadHeader),
		Read:       pick(t.Read, def.Read),
		WriteStall: pick(t.WriteStall, def.WriteStall),
		Idle:       pick(t.Idle, def.Idle),
	}
	srv := &http.Server{
		Handler:           stallBound(h, t.WriteStall),
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		IdleTimeout:       t.Idle,
	}
	if errLog != nil {
		srv.ErrorLog = slog.NewLogLogger(errLog.Handler(), slog.LevelDebug)
	}
	return srv
}

// stallBound gives every write of a response d to complete: the write
// deadline is cleared when the handler starts (one left by the previous
// request of a keep-alive connection must not cut this one), moved to
// now+d before each write and flush, and set once more when the handler
// returns, for the server's final flush.
func stallBound(next http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Time{})
		sw := &stallWriter{ResponseWriter: w, rc: rc, d: d}
		next.ServeHTTP(sw, r)
		_ = rc.SetWriteDeadline(time.Now().Add(d))
	})
}

type stallWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *stallWriter) arm() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.d)) }

func (w *stallWriter) Write(b []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(b)
}

func (w *stallWriter) WriteHeader(code int) {
	w.arm()
	w.ResponseWriter.WriteHeader(code)
}

// Flush lets streaming handlers flush through the wrapper.
func (w *stallWriter) Flush() {
	w.arm()
	_ = w.rc.Flush()
}

// FlushError is Flush with its error (http.ResponseController uses it).
func (w *stallWriter) FlushError() error {
	w.arm()
	return w.rc.Flush()
}

// Hijack passes a hijack through (nothing sluice serves uses it).
func (w *stallWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hijacking is not supported")
	}
	return h.Hijack()
}

// Unwrap exposes the underlying writer to http.ResponseController.
func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
