package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/services/sluice/internal/export"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/state"
)

// tenantReads serves one snapshot and, for each destination, one row that
// names it, so a test sees whose rows it got.
type tenantReads struct{}

func (tenantReads) Snapshots(context.Context, SnapshotsQuery) (SnapshotsPage, error) {
	return SnapshotsPage{Snapshots: []Snapshot{{Version: 1, ThroughLSN: "0/10", Packs: 2, Pinned: true, PinReason: "kept for shop2's audit"}}}, nil
}

func (tenantReads) Rows(_ context.Context, q RowsQuery) (RowsPage, error) {
	return RowsPage{Snapshot: 1, Rows: []json.RawMessage{json.RawMessage(`{"id":1,"owner":"` + q.Destination + `"}`)}}, nil
}
func (tenantReads) Pin(context.Context, uint64, string) (Pin, error) { return Pin{}, ErrNotFound }
func (tenantReads) Unpin(context.Context, uint64) error              { return ErrNotFound }
func (tenantReads) Columns(context.Context, string) ([]export.Column, error) {
	return nil, nil
}

func (tenantReads) Changes(_ context.Context, q ChangesQuery) (ChangesPage, error) {
	return ChangesPage{From: q.From, To: 1}, nil
}

func (tenantReads) Tables(context.Context, string, uint64) ([]string, error) {
	return []string{"public.items"}, nil
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tokenEnv is one API server behind operator token "tok", with tenant
// tokens in a real state database and the DLQ on an embedded NATS server,
// so that every route the API has is registered.
type tokenEnv struct {
	h      *httpx.Server
	reg    *prometheus.Registry
	srv    *httptest.Server
	pool   *pgxpool.Pool
	tokens *state.Tokens
	logs   *syncBuffer
}

func newTokenEnv(t *testing.T) *tokenEnv {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := state.Migrate(ctx, pool, "sluice"); err != nil {
		t.Fatal(err)
	}
	e := newDLQEnv(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	h := httpx.New("127.0.0.1:0", "tok", reg, log)
	ts := state.NewTokens(pool, "sluice")
	Register(h, Deps{Log: log, Reads: tenantReads{}, JS: e.js, Config: config.Default(), Tokens: ts})
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(srv.Close)
	return &tokenEnv{h: h, reg: reg, srv: srv, pool: pool, tokens: ts, logs: logs}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (e *tokenEnv) do(t *testing.T, method, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if method != http.MethodGet {
		req.Header.Set(ClientHeader, "sluice-cli")
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// concrete turns a route pattern into a request of it: wildcards get
// sample values, and every request names destination shop1 (with what the
// read routes need), so that a refusal is the scope's, not a missing
// parameter's.
func concrete(pattern string) (method, path string) {
	method, path, _ = strings.Cut(pattern, " ")
	path = wildcard.ReplaceAllStringFunc(path, func(w string) string {
		switch w {
		case "{$}":
			return ""
		case "{version}", "{seq}":
			return "7"
		case "{name}":
			return "shop1"
		}
		return "nope"
	})
	return method, path + "?destination=shop1&table=public.items&format=jsonl&from=1"
}

// createToken makes a tenant token through the API, as the CLI does.
func (e *tokenEnv) createToken(t *testing.T, body string) CreatedToken {
	t.Helper()
	code, out := e.do(t, "POST", "/api/v1/tokens", "tok", body)
	var ct CreatedToken
	if code != http.StatusCreated || json.Unmarshal([]byte(out), &ct) != nil || ct.Secret == "" {
		t.Fatalf("POST /api/v1/tokens %s: %d %s", body, code, out)
	}
	return ct
}

// TestTenantRouteWalk walks every route the API and the HTTP server
// register (httpx.Server.Patterns, so a new route cannot be left out) with
// the operator token (never refused), a tenant token of shop1 (200 on the
// read routes of its own destination, 403 on every other route, and on
// those routes naming shop1 with a token of shop2), and with an expired, a
// revoked and a garbage token (401, except the open /healthz and /readyz).
// Its negative control switches the scope check off: the walk then fails.
func TestTenantRouteWalk(t *testing.T) {
	e := newTokenEnv(t)
	own := e.createToken(t, `{"destination": "shop1", "name": "shop1 reports", "expires": "30d"}`)
	if own.Destination != "shop1" || own.Name != "shop1 reports" || own.ExpiresAt == nil {
		t.Fatalf("created %+v", own.Token)
	}
	other := e.createToken(t, `{"value": "shop2"}`)
	revoked := e.createToken(t, `{"destination": "shop1"}`)
	if code, body := e.do(t, "DELETE", "/api/v1/tokens/"+revoked.ID, "tok", ""); code != 200 {
		t.Fatalf("revoke: %d %s", code, body)
	}
	expired := e.createToken(t, `{"destination": "shop1", "expires": "1h"}`)
	if _, err := e.pool.Exec(context.Background(), `UPDATE sluice.tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, expired.ID); err != nil {
		t.Fatal(err)
	}
	garbage := state.TokenPrefix + own.ID + "_" + strings.Repeat("a", 52)

	patterns := e.h.Patterns()
	registered := map[string]bool{}
	for _, p := range patterns {
		registered[p] = true
	}
	for p := range tenantRoutes {
		if !registered[p] {
			t.Errorf("tenantRoutes lists %q, which nothing registers", p)
		}
	}
	if len(patterns) < 40 {
		t.Fatalf("only %d patterns registered: %v", len(patterns), patterns)
	}

	open := map[string]bool{"GET /healthz": true, "GET /readyz": true}
	walk := func(t *testing.T) (wrong []string) {
		check := func(who, pattern string, code int, body string, ok func(int) bool, want string) {
			if !ok(code) {
				wrong = append(wrong, fmt.Sprintf("%s, %s: %d %.120s; want %s", pattern, who, code, strings.TrimSpace(body), want))
			}
		}
		is := func(c int) func(int) bool { return func(got int) bool { return got == c } }
		for _, p := range patterns {
			method, path := concrete(p)
			code, body := e.do(t, method, path, "tok", "")
			check("operator", p, code, body, func(c int) bool { return c != 401 && c != 403 }, "neither 401 nor 403")
			ownRoute, listed := tenantRoutes[p]
			switch {
			case open[p]:
				for who, tok := range map[string]string{"tenant": own.Secret, "expired": expired.Secret, "garbage": garbage} {
					code, body := e.do(t, method, path, tok, "")
					check(who, p, code, body, is(200), "200 (open)")
				}
				continue
			case listed:
				code, body := e.do(t, method, path, own.Secret, "")
				check("tenant of shop1", p, code, body, is(200), "200")
				code, body = e.do(t, method, path, other.Secret, "")
				if ownRoute {
					check("tenant of shop2", p, code, body, is(403), "403")
				} else {
					check("tenant of shop2", p, code, body, is(200), "200 (names no destination)")
				}
			default:
				code, body := e.do(t, method, path, own.Secret, "")
				check("tenant of shop1", p, code, body, is(403), "403")
			}
			for who, tok := range map[string]string{"expired": expired.Secret, "revoked": revoked.Secret, "garbage": garbage, "none": ""} {
				code, body := e.do(t, method, path, tok, "")
				check(who, p, code, body, is(401), "401")
				if strings.Contains(body, "shop1") || strings.Contains(body, "shop2") {
					wrong = append(wrong, fmt.Sprintf("%s, %s: the refusal names a tenant: %s", p, who, body))
				}
			}
		}
		return wrong
	}
	for _, w := range walk(t) {
		t.Error(w)
	}

	// The tenant's own rows, by name and by value; another's refused by
	// value too; the pin reason left out.
	for _, q := range []string{"destination=shop1", "value=shop1"} {
		code, body := e.do(t, "GET", "/api/v1/rows?table=public.items&"+q, own.Secret, "")
		if code != 200 || !strings.Contains(body, `"owner":"shop1"`) {
			t.Errorf("rows?%s: %d %s", q, code, body)
		}
	}
	for _, q := range []string{"value=shop2", "destination=shop2", "", "destination=shop1&value=shop2"} {
		if code, body := e.do(t, "GET", "/api/v1/rows?table=public.items&"+q, own.Secret, ""); code != 403 || strings.Contains(body, "owner") {
			t.Errorf("rows?%s by shop1's token: %d %s, want 403", q, code, body)
		}
	}
	for _, path := range []string{"/api/v1/snapshots", "/api/v1/snapshots/latest"} {
		if code, body := e.do(t, "GET", path, own.Secret, ""); code != 200 || strings.Contains(body, "audit") {
			t.Errorf("%s by a tenant: %d %s, want 200 without the pin reason", path, code, body)
		}
		if _, body := e.do(t, "GET", path, "tok", ""); !strings.Contains(body, "audit") {
			t.Errorf("%s by the operator: %s, want the pin reason", path, body)
		}
	}
	// The messages of a dead token.
	if _, body := e.do(t, "GET", "/api/v1/rows?destination=shop1", expired.Secret, ""); !strings.Contains(body, "expired") {
		t.Errorf("expired: %s", body)
	}
	if _, body := e.do(t, "GET", "/api/v1/rows?destination=shop1", revoked.Secret, ""); !strings.Contains(body, "revoked") {
		t.Errorf("revoked: %s", body)
	}

	// Counted by outcome.
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "sluice_http_tenant_requests_total" {
			for _, m := range mf.GetMetric() {
				counts[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	for _, o := range []string{httpx.OutcomeAllowed, httpx.OutcomeForbidden, httpx.OutcomeExpired, httpx.OutcomeRevoked, httpx.OutcomeInvalid} {
		if counts[o] == 0 {
			t.Errorf("sluice_http_tenant_requests_total{outcome=%q} = 0 (%v)", o, counts)
		}
	}
	// No secret in a log line or a list.
	_, list := e.do(t, "GET", "/api/v1/tokens", "tok", "")
	for _, tok := range []CreatedToken{own, other, revoked, expired} {
		_, secret, _ := state.ParseToken(tok.Secret)
		if strings.Contains(e.logs.String(), secret) || strings.Contains(list, secret) {
			t.Errorf("token %s's secret is in the log or the list", tok.ID)
		}
	}
	if !strings.Contains(e.logs.String(), "tenant token created") {
		t.Errorf("the log was not captured: %s", e.logs.String())
	}

	t.Run("control: scope check off", func(t *testing.T) {
		tenantScopeOff = true
		defer func() { tenantScopeOff = false }()
		wrong := walk(t)
		if len(wrong) < len(patterns)/2 {
			t.Fatalf("with the scope check off only %d requests went wrong: %v", len(wrong), wrong)
		}
		t.Logf("with the scope check off, %d of the walk's requests over %d routes go wrong, e.g. %.100s", len(wrong), len(patterns), wrong[0])
	})
}

// Token management: the operator's alone; a server without an operator
// token refuses to create one; expiry spellings.
func TestTokenManagement(t *testing.T) {
	e := newTokenEnv(t)
	ct := e.createToken(t, `{"destination": "shop1", "expires": "never"}`)
	if ct.ExpiresAt != nil || !strings.HasPrefix(ct.Secret, state.TokenPrefix+ct.ID+"_") {
		t.Fatalf("%+v", ct)
	}
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/api/v1/tokens", `{"destination": "shop1"}`},
		{"GET", "/api/v1/tokens", ""},
		{"DELETE", "/api/v1/tokens/" + ct.ID, ""},
	} {
		if code, body := e.do(t, req.method, req.path, ct.Secret, req.body); code != 403 {
			t.Errorf("%s %s with a tenant token: %d %s, want 403", req.method, req.path, code, body)
		}
	}
	for body, want := range map[string]int{
		`{}`:                     400,
		`{"destination": "a.b"}`: 400,
		`{"destination": "shop1", "value": "shop1"}`: 400,
		`{"destination": "shop1", "expires": "3x"}`:  400,
		`not json`: 400,
	} {
		if code, out := e.do(t, "POST", "/api/v1/tokens", "tok", body); code != want {
			t.Errorf("POST %s: %d %s, want %d", body, code, out, want)
		}
	}
	if code, _ := e.do(t, "DELETE", "/api/v1/tokens/nope", "tok", ""); code != 404 {
		t.Errorf("revoke unknown: %d", code)
	}
	req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/tokens", strings.NewReader(`{"destination":"shop1"}`))
	req.Header.Set("Authorization", "Bearer tok")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("POST without the client header: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// Tokenless (loopback dev mode): creating one is refused.
	log := slog.New(slog.DiscardHandler)
	h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
	Register(h, Deps{Log: log, Config: config.Default(), Tokens: e.tokens})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	req, _ = http.NewRequest("POST", srv.URL+"/api/v1/tokens", strings.NewReader(`{"destination":"shop1"}`))
	req.Header.Set(ClientHeader, "sluice-cli")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 409 || !strings.Contains(string(b), "no operator token") {
		t.Errorf("tokenless create: %d %s", resp.StatusCode, b)
	}

	for in, want := range map[string]time.Duration{"": DefaultTokenExpiry, "30d": 30 * 24 * time.Hour, "12h": 12 * time.Hour, "never": 0} {
		if got, err := ParseExpiry(in); err != nil || got != want {
			t.Errorf("ParseExpiry(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"0d", "-1h", "30s", "d", "forever"} {
		if _, err := ParseExpiry(in); err == nil {
			t.Errorf("ParseExpiry(%q) accepted", in)
		}
	}
}

// allowTenant of the route being built on another branch: its own
// destination only.
func TestTenantChangesRoute(t *testing.T) {
	a := &handler{d: Deps{Config: config.Default()}}
	s := httpx.Scope{Destination: "shop1"}
	for q, ok := range map[string]bool{"destination=shop1": true, "value=shop1": true, "destination=shop2": false, "": false} {
		r := httptest.NewRequest("GET", "/api/v1/changes?"+q, nil)
		if err := a.allowTenant(r, "GET /api/v1/changes", s); (err == nil) != ok {
			t.Errorf("changes?%s: %v", q, err)
		}
	}
}
