package api

// Tenant tokens (issue 35 item 2; ADR 0048). A tenant token reads one
// destination and reaches only tenantRoutes; httpx checks the credential
// (state.Tokens.Verify, no cache: a revocation holds from the next
// request) and asks allowTenant of every request's route pattern, so a
// route not listed here — every route added later included — is refused
// to it (403) without any handler knowing about tokens.
//
// The tokens themselves are managed with the operator token only:
//
//	POST   /api/v1/tokens        {"destination": NAME | "value": V, "name": N, "expires": "30d"|"never"}
//	                             201 with the token's plaintext, shown this once
//	GET    /api/v1/tokens        every token, never a secret
//	DELETE /api/v1/tokens/{id}   revoke it, at once
//
// POST and DELETE pass the request guard of every change (guard.go). A
// server without an operator token refuses to create one (409): there
// everything is open to whoever may reach it, and a tenant token would
// promise a scope nothing enforces.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/state"
)

// tenantRoutes are the only route patterns a tenant token reaches, each
// with whether the request must name the token's own destination
// (destination= or value=, resolved by target). The snapshot list and the
// latest snapshot name no destination: versions, times, through_lsn and
// pack counts are the same for every tenant (pin reasons, which an
// operator writes, are left out for a tenant: redactPins).
var tenantRoutes = map[string]bool{
	"GET /api/v1/rows":             true,
	"GET /api/v1/export":           true,
	"GET /api/v1/tables":           true,
	"GET /api/v1/changes":          true,
	"GET /api/v1/snapshots":        false,
	"GET /api/v1/snapshots/latest": false,
}

// tenantScopeOff switches the scope check off: for the negative control of
// TestTenantRouteWalk only.
var tenantScopeOff bool

// allowTenant is httpx.Tenants.Allow: nil when s may reach pattern with r.
func (a *handler) allowTenant(r *http.Request, pattern string, s httpx.Scope) error {
	if tenantScopeOff {
		return nil
	}
	own, ok := tenantRoutes[pattern]
	if !ok {
		return errors.New("forbidden: a tenant token reads only its destination's rows, exports and changes, and the snapshot list; this needs the operator token")
	}
	if !own {
		return nil
	}
	name, err := a.target(r.URL.Query())
	if err != nil || name != s.Destination {
		return errors.New("forbidden: a tenant token reads only its own destination: name it with destination= or value=")
	}
	return nil
}

// verifyTenant is httpx.Tenants.Verify over state.Tokens.
func verifyTenant(ts *state.Tokens) func(ctx context.Context, token string) (httpx.Scope, error) {
	return func(ctx context.Context, token string) (httpx.Scope, error) {
		v, err := ts.Verify(ctx, token)
		switch {
		case err != nil:
			return httpx.Scope{}, err
		case v.OK:
			return httpx.Scope{TokenID: v.ID, Destination: v.Destination}, nil
		case v.Reason == state.TokenExpired:
			return httpx.Scope{}, httpx.ErrTokenExpired
		case v.Reason == state.TokenRevoked:
			return httpx.Scope{}, httpx.ErrTokenRevoked
		}
		return httpx.Scope{}, httpx.ErrTokenInvalid
	}
}

// redactPins drops the operator's pin reasons from what a tenant token
// reads: free text that may name another tenant.
func redactPins(r *http.Request, snaps []Snapshot) {
	if _, scoped := httpx.ScopeOf(r.Context()); !scoped {
		return
	}
	for i := range snaps {
		snaps[i].PinReason = ""
	}
}

// TokenRequest is the body of POST /api/v1/tokens.
type TokenRequest struct {
	Destination string  `json:"destination,omitempty"`
	Value       *string `json:"value,omitempty"` // a routing value; "" is one
	Name        string  `json:"name,omitempty"`
	// Expires is how long it lives: "30d", a Go duration ("12h"), or
	// "never"; empty: DefaultTokenExpiry.
	Expires string `json:"expires,omitempty"`
}

// CreatedToken is the answer of POST /api/v1/tokens: the token's
// plaintext, which is never shown again.
type CreatedToken struct {
	state.Token
	Secret string `json:"token"`
}

// DefaultTokenExpiry is a tenant token's life when none is asked for.
const DefaultTokenExpiry = 90 * 24 * time.Hour

// ParseExpiry reads a token's life: "Nd" (days), a Go duration, or
// "never" (0); "" is DefaultTokenExpiry.
func ParseExpiry(s string) (time.Duration, error) {
	switch s {
	case "":
		return DefaultTokenExpiry, nil
	case "never":
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 36500 {
			return 0, fmt.Errorf("expiry %q: want a number of days from 1 to 36500 (30d), a duration (12h) or never", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Minute {
		return 0, fmt.Errorf("expiry %q: want days (30d), a duration of at least a minute (12h) or never", s)
	}
	return d, nil
}

func registerTokens(h *httpx.Server, a *handler) {
	h.Handle("POST /api/v1/tokens", changes("to create a token", a.tokenCreate))
	h.Handle("GET /api/v1/tokens", http.HandlerFunc(a.tokenList))
	h.Handle("DELETE /api/v1/tokens/{id}", changes("to revoke a token", a.tokenRevoke))
}

func (a *handler) noTokens(w http.ResponseWriter) bool {
	if a.d.Tokens != nil {
		return false
	}
	writeJSON(w, http.StatusServiceUnavailable, Error{Error: "this process has no state database for tokens: ask the process that serves the API with it (sluice dev)"})
	return true
}

func (a *handler) tokenCreate(w http.ResponseWriter, r *http.Request) {
	if a.noTokens(w) {
		return
	}
	if !a.operatorToken {
		a.fail(w, errors.Join(ErrConflict, errors.New("this server has no operator token (SLUICE_HTTP_TOKEN): it serves every tenant to whoever reaches it, so a tenant token would restrict nothing; set one, then create tenant tokens")))
		return
	}
	var req TokenRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		a.fail(w, errors.Join(ErrBadRequest, fmt.Errorf("decoding the body (want {\"destination\": NAME or \"value\": V, \"name\": N, \"expires\": \"30d\"}): %w", err)))
		return
	}
	q := url.Values{}
	if req.Destination != "" {
		q.Set(paramDestination, req.Destination)
	}
	if req.Value != nil {
		q.Set(paramValue, *req.Value)
	}
	dest, err := a.target(q)
	if err != nil {
		a.fail(w, err)
		return
	}
	ttl, err := ParseExpiry(req.Expires)
	if err != nil {
		a.fail(w, errors.Join(ErrBadRequest, err))
		return
	}
	tok, secret, err := a.d.Tokens.Create(r.Context(), dest, req.Name, ttl)
	if errors.Is(err, state.ErrBadArgument) {
		err = errors.Join(ErrBadRequest, err)
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	a.d.Log.Info("tenant token created", "id", tok.ID, "destination", tok.Destination, "expires_at", tok.ExpiresAt)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, CreatedToken{Token: tok, Secret: secret})
}

func (a *handler) tokenList(w http.ResponseWriter, r *http.Request) {
	if a.noTokens(w) {
		return
	}
	ts, err := a.d.Tokens.List(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	if ts == nil {
		ts = []state.Token{}
	}
	writeJSON(w, http.StatusOK, ts)
}

func (a *handler) tokenRevoke(w http.ResponseWriter, r *http.Request) {
	if a.noTokens(w) {
		return
	}
	tok, err := a.d.Tokens.Revoke(r.Context(), r.PathValue("id"))
	if errors.Is(err, state.ErrTokenNotFound) {
		err = errors.Join(ErrNotFound, err)
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	a.d.Log.Info("tenant token revoked", "id", tok.ID, "destination", tok.Destination)
	writeJSON(w, http.StatusOK, tok)
}
