package httpx

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func do(t *testing.T, url, host, auth string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if host != "" {
		req.Host = host
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// nonLoopback is an address of this machine other hosts could reach: the
// wildcard, which is what a container's 0.0.0.0:8080 binds.
const nonLoopback = "0.0.0.0:0"

// TestRefusesTokenlessNonLoopback: a server without a token does not start
// on an address other hosts can reach; with a token it does.
func TestRefusesTokenlessNonLoopback(t *testing.T) {
	s := New(nonLoopback, "", nil, nil)
	if a := s.Addr(); a != "" {
		t.Fatalf("tokenless server bound %s", a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.Run(ctx)
	if !errors.Is(err, ErrNoAuth) || !strings.Contains(err.Error(), "SLUICE_HTTP_TOKEN") || !strings.Contains(err.Error(), "http.insecure_no_auth") {
		t.Fatalf("Run = %v, want ErrNoAuth naming the fixes", err)
	}
	// Negative control: the same address with a token serves, and demands it.
	tok := New(nonLoopback, "s3cret", nil, nil)
	base := "http://127.0.0.1:" + port(t, run(t, tok))
	if code, _ := get(t, base+"/api/v1/x", ""); code != http.StatusUnauthorized {
		t.Fatalf("token server without token: %d", code)
	}
	if code, _ := get(t, base+"/healthz", ""); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
}

// TestInsecureNoAuthWarns: http.insecure_no_auth lets it start open, with a
// warning, and without the Host check (it is meant to be reached by name).
func TestInsecureNoAuthWarns(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s := New(nonLoopback, "", nil, log, InsecureNoAuth(true))
	s.Handle("GET /api/v1/x", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	base := "http://127.0.0.1:" + port(t, run(t, s))
	if code, _ := do(t, base+"/api/v1/x", "sluice.example.com", ""); code != http.StatusOK {
		t.Fatalf("insecure server: %d", code)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "insecure_no_auth") {
		t.Fatalf("no warning logged: %s", logs.String())
	}
}

// TestHostGuard: a tokenless loopback server answers only loopback names
// with its own port, so a page that rebinds its own name to 127.0.0.1 is
// refused.
func TestHostGuard(t *testing.T) {
	s := New("127.0.0.1:0", "", nil, nil)
	s.Handle("GET /api/v1/x", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("rows")) }))
	base := run(t, s)
	p := port(t, base)
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1:" + p, true},
		{"localhost:" + p, true},
		{"LOCALHOST:" + p, true},
		{"ui.localhost:" + p, true},
		{"127.0.0.2:" + p, true},
		{"[::1]:" + p, true},
		{"attacker.example:" + p, false},
		{"localhost.attacker.example:" + p, false},
		{"127.0.0.1.nip.io:" + p, false},
		{"10.0.0.5:" + p, false},
		{"localhost:1", false},
		{"localhost", false},
	} {
		code, body := do(t, base+"/api/v1/x", tc.host, "")
		if tc.ok && code != http.StatusOK {
			t.Errorf("Host %s: %d %q, want 200", tc.host, code, body)
		}
		if !tc.ok && (code != http.StatusForbidden || !strings.Contains(body, "not a loopback name")) {
			t.Errorf("Host %s: %d %q, want 403", tc.host, code, body)
		}
	}
}

// TestTokenAsBasicPassword: a browser that was asked (WWW-Authenticate:
// Basic) sends the token as the Basic password; a wrong one is refused.
func TestTokenAsBasicPassword(t *testing.T) {
	s := New("127.0.0.1:0", "tok3n", nil, nil)
	s.Handle("GET /ui", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	base := run(t, s)
	basic := func(u, p string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p)) }
	if code, _ := do(t, base+"/ui", "", basic("me", "tok3n")); code != http.StatusOK {
		t.Fatalf("basic with the token: %d", code)
	}
	if code, _ := do(t, base+"/ui", "", basic("tok3n", "x")); code != http.StatusUnauthorized {
		t.Fatalf("basic with a wrong password: %d", code)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/ui", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Values("WWW-Authenticate"); len(got) != 2 {
		t.Fatalf("challenges %q, want Bearer and Basic", got)
	}
}

func port(t *testing.T, base string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestInsecureNoAuthOnLoopbackWarns: insecure_no_auth drops the Host check
// on loopback too, so it is warned about there as well.
func TestInsecureNoAuthOnLoopbackWarns(t *testing.T) {
	var logs bytes.Buffer
	s := New("127.0.0.1:0", "", nil, slog.New(slog.NewTextHandler(&logs, nil)), InsecureNoAuth(true))
	base := run(t, s)
	if code, _ := do(t, base+"/healthz", "sluice.example.com", ""); code != http.StatusOK {
		t.Fatalf("insecure loopback server with another Host: %d", code)
	}
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("no warning: %s", logs.String())
	}
}
