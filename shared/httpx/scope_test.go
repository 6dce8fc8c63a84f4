package httpx

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A tenant token reaches only what Allow accepts, by the mux's pattern
// (an unregistered path, a wrong method: refused); its scope is in the
// handler's context; the operator token is untouched; a tokenless server
// takes no tenants.
func TestTenants(t *testing.T) {
	if New("127.0.0.1:0", "", nil, nil).SetTenants(Tenants{Prefix: "t_", Verify: func(context.Context, string) (Scope, error) { return Scope{}, nil }, Allow: func(*http.Request, string, Scope) error { return nil }}) {
		t.Fatal("a tokenless server took tenant tokens")
	}
	s := New("127.0.0.1:0", "op", nil, nil)
	s.Handle("GET /read", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc, _ := ScopeOf(r.Context())
		_, _ = io.WriteString(w, "read:"+sc.Destination)
	}))
	s.Handle("GET /admin", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "admin") }))
	var seen []string
	if !s.SetTenants(Tenants{
		Prefix: "t_",
		Verify: func(_ context.Context, tok string) (Scope, error) {
			switch tok {
			case "t_ok":
				return Scope{TokenID: "1", Destination: "d1"}, nil
			case "t_old":
				return Scope{}, ErrTokenExpired
			case "t_gone":
				return Scope{}, ErrTokenRevoked
			case "t_down":
				return Scope{}, errors.New("database down")
			}
			return Scope{}, ErrTokenInvalid
		},
		Allow: func(_ *http.Request, pattern string, _ Scope) error {
			seen = append(seen, pattern)
			if pattern == "GET /read" {
				return nil
			}
			return errors.New("forbidden: not yours")
		},
	}) {
		t.Fatal("SetTenants refused")
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		method, path, token string
		code                int
		body                string
	}{
		{"GET", "/read", "op", 200, "read:"},
		{"GET", "/admin", "op", 200, "admin"},
		{"GET", "/read", "t_ok", 200, "read:d1"},
		{"GET", "/admin", "t_ok", 403, "not yours"},
		{"GET", "/nowhere", "t_ok", 403, "not yours"},
		{"POST", "/read", "t_ok", 403, "not yours"},
		{"GET", "/metrics", "t_ok", 403, "not yours"},
		{"GET", "/healthz", "t_bad", 200, "ok"},
		{"GET", "/read", "t_old", 401, "expired"},
		{"GET", "/read", "t_gone", 401, "revoked"},
		{"GET", "/read", "t_bad", 401, "unauthorized"},
		{"GET", "/read", "t_down", 503, "could not be checked"},
		{"GET", "/read", "other", 401, "unauthorized"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+tc.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.body) {
			t.Errorf("%s %s with %s: %d %q, want %d with %q", tc.method, tc.path, tc.token, resp.StatusCode, b, tc.code, tc.body)
		}
	}
	if want := []string{"GET /read", "GET /admin", "", "", "GET /metrics"}; strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Errorf("Allow saw patterns %q, want %q", seen, want)
	}
}
