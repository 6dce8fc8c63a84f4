package httpx

import (
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
)

// ErrNoAuth is returned when a server without a token would listen on a
// non-loopback address without InsecureNoAuth.
var ErrNoAuth = errors.New("refusing to serve without a token on a non-loopback address")

// CheckListen is the start-up half of the access rule: a server without a
// token may bind only a loopback address, unless insecure is set (then it
// logs a warning and serves open, on any address). addr is the bound
// address.
func CheckListen(addr net.Addr, token string, insecure bool, log *slog.Logger) error {
	switch {
	case token != "":
		return nil
	case insecure:
		// Open, and without the Host check even on loopback.
		if log != nil {
			log.Warn("serving HTTP without authentication (insecure_no_auth): anyone who can reach it, or a web page by DNS rebinding, can read and change what it serves", "addr", addr.String())
		}
		return nil
	case IsLoopback(addr):
		return nil
	}
	return fmt.Errorf("%w: %s is reachable from other hosts; set SLUICE_HTTP_TOKEN, listen on a loopback address (127.0.0.1:PORT), or set http.insecure_no_auth: true to serve it open", ErrNoAuth, addr)
}

// Protect is the per-request half of the access rule:
//
//   - with a token, every path for which open returns false (open may be
//     nil) requires it as "Authorization: Bearer <token>" (or, for a
//     browser, as the password of HTTP Basic auth), compared in constant
//     time;
//   - without a token and without insecure, a request must have reached a
//     loopback address and name the server by a loopback name and the
//     port it reached in its Host header (HostGuard), so a web page cannot
//     reach it by DNS rebinding;
//   - with insecure and no token, everything is open.
//
// Protect knows no tenant tokens; a Server's handler adds them
// (Server.SetTenants).
func Protect(next http.Handler, token string, insecure bool, open func(path string) bool) http.Handler {
	return protect(next, token, insecure, open, nil)
}

// protect is Protect with the server's tenant-token check (tenants may be
// nil, or return nil: no tenant tokens), read on every request.
func protect(next http.Handler, token string, insecure bool, open func(path string) bool, tenants func() *tenantCheck) http.Handler {
	if open == nil {
		open = func(string) bool { return false }
	}
	if tenants == nil {
		tenants = func() *tenantCheck { return nil }
	}
	switch {
	case token != "":
		return bearer(next, token, open, tenants)
	case insecure:
		return next
	}
	return HostGuard(next)
}

// IsLoopback reports whether a bound address accepts only local
// connections.
func IsLoopback(addr net.Addr) bool {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.IsLoopback()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// HostGuard answers 403 to every request whose Host header is not a
// loopback name of this server: localhost (or a name under .localhost) or a
// loopback IP (127.0.0.0/8, [::1]), with the port the connection reached
// (or no port when that is 80), and to every request that reached a
// non-loopback address. A browser that was led to a tokenless local server
// by DNS rebinding sends the attacker's name as Host and is refused.
func HostGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		port := ""
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if !IsLoopback(local) {
				http.Error(w, "forbidden: a server without a token answers only on loopback (set SLUICE_HTTP_TOKEN)", http.StatusForbidden)
				return
			}
			_, port, _ = net.SplitHostPort(local.String())
		}
		if !loopbackHost(r.Host, port) {
			http.Error(w, fmt.Sprintf("forbidden: Host %q is not a loopback name of this server; a server without a token answers only localhost, 127.0.0.1 or [::1] with its port (set SLUICE_HTTP_TOKEN to serve other names)", r.Host), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether hostport names loopback, with port (any
// port when port is "").
func loopbackHost(hostport, port string) bool {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		// No port (or a bare IPv6 literal): only right for port 80.
		host, p = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), "80"
	}
	if port != "" && p != port {
		return false
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if i := strings.IndexByte(host, '%'); i >= 0 { // fe80::1%lo zone
		host = host[:i]
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// bearer requires token on every path open does not exempt, or a tenant
// token that tenants accepts for the request's route.
func bearer(next http.Handler, token string, open func(string) bool, tenants func() *tenantCheck) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if open(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		got := presented(r)
		if subtle.ConstantTimeCompare(got, want) == 1 {
			next.ServeHTTP(w, r)
			return
		}
		if tc := tenants(); tc != nil && tc.t.Prefix != "" && strings.HasPrefix(string(got), tc.t.Prefix) {
			tc.serve(w, r, string(got), next)
			return
		}
		unauthorized(w, "unauthorized: send the token (SLUICE_HTTP_TOKEN) as Authorization: Bearer")
	})
}

// unauthorized answers 401 with msg.
func unauthorized(w http.ResponseWriter, msg string) {
	// Bearer for clients; Basic so a browser asks for it (any user
	// name, the token as password) and sends it with the UI's fetches.
	w.Header().Add("WWW-Authenticate", `Bearer realm="sluice"`)
	w.Header().Add("WWW-Authenticate", `Basic realm="sluice", charset="UTF-8"`)
	http.Error(w, msg, http.StatusUnauthorized)
}

// presented is the credential of a request: the bearer token, or the
// password of Basic auth.
func presented(r *http.Request) []byte {
	h := r.Header.Get("Authorization")
	scheme, cred, _ := strings.Cut(h, " ")
	switch {
	case strings.EqualFold(scheme, "Bearer"):
		return []byte(cred)
	case strings.EqualFold(scheme, "Basic"):
		b, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return nil
		}
		_, pass, _ := strings.Cut(string(b), ":")
		return []byte(pass)
	}
	return nil
}
