package httpx

// Tenant tokens: the second credential the access rule knows. The
// operator token (SLUICE_HTTP_TOKEN) reaches everything, as before. A
// credential that is not the operator token but carries Tenants.Prefix is
// handed to Tenants.Verify; a valid one is a Scope (one destination), and
// the request is served only when Tenants.Allow accepts the route pattern
// the mux chose for it — so a route nobody listed (a new one, a 404, a
// 405) is refused to a tenant by default. The scope travels in the
// request's context (ScopeOf). Tenant tokens are honoured only on a server
// with an operator token: without one everything is open to whoever the
// Host check lets in, and a scope would mean nothing.

import (
	"context"
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// Scope is what a tenant token lets a request read: one destination.
type Scope struct {
	TokenID     string
	Destination string
}

type scopeKey struct{}

// ScopeOf returns the scope of a request made with a tenant token; ok is
// false for the operator token and for a server without tokens.
func ScopeOf(ctx context.Context) (Scope, bool) {
	s, ok := ctx.Value(scopeKey{}).(Scope)
	return s, ok
}

// WithScope returns ctx carrying s (for tests of handlers).
func WithScope(ctx context.Context, s Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// Tenant token refusals Verify returns; any other error is a failure to
// check (503).
var (
	ErrTokenInvalid = errors.New("invalid token")
	ErrTokenExpired = errors.New("token expired")
	ErrTokenRevoked = errors.New("token revoked")
)

// Tenants is the tenant-token half of the access rule.
type Tenants struct {
	// Prefix marks a credential as a tenant token.
	Prefix string
	// Verify checks a tenant token: its scope, or ErrTokenInvalid,
	// ErrTokenExpired, ErrTokenRevoked, or another error when it cannot
	// be checked now.
	Verify func(ctx context.Context, token string) (Scope, error)
	// Allow decides whether s may reach pattern (the mux's pattern for r,
	// "" when none matches): nil, or the refusal's message (403).
	Allow func(r *http.Request, pattern string, s Scope) error
}

// Tenant-token request outcomes (the outcome label of
// sluice_http_tenant_requests_total).
const (
	OutcomeAllowed   = "allowed"
	OutcomeForbidden = "forbidden"
	OutcomeInvalid   = "invalid"
	OutcomeExpired   = "expired"
	OutcomeRevoked   = "revoked"
	OutcomeError     = "error"
)

func newTenantCounter(reg *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_http_tenant_requests_total",
		Help: "HTTP requests made with a tenant token, by outcome: allowed, forbidden (a route or destination outside its scope), invalid, expired, revoked, error (not checked: the state database).",
	}, []string{"outcome"})
	for _, o := range []string{OutcomeAllowed, OutcomeForbidden, OutcomeInvalid, OutcomeExpired, OutcomeRevoked, OutcomeError} {
		c.WithLabelValues(o)
	}
	if reg != nil {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return are.ExistingCollector.(*prometheus.CounterVec)
			}
		}
	}
	return c
}

// tenantCheck serves r under a tenant token's scope, or refuses it.
type tenantCheck struct {
	t       Tenants
	route   func(*http.Request) string
	counted *prometheus.CounterVec
}

func (c *tenantCheck) serve(w http.ResponseWriter, r *http.Request, token string, next http.Handler) {
	s, err := c.t.Verify(r.Context(), token)
	// The messages name no destination: whoever holds a dead token learns
	// nothing from it but that it is dead.
	switch {
	case errors.Is(err, ErrTokenExpired):
		c.count(OutcomeExpired)
		unauthorized(w, "unauthorized: this tenant token has expired; ask the operator for a new one (sluice tokens create)")
		return
	case errors.Is(err, ErrTokenRevoked):
		c.count(OutcomeRevoked)
		unauthorized(w, "unauthorized: this tenant token has been revoked; ask the operator for a new one (sluice tokens create)")
		return
	case errors.Is(err, ErrTokenInvalid):
		c.count(OutcomeInvalid)
		unauthorized(w, "unauthorized: send the token (SLUICE_HTTP_TOKEN) as Authorization: Bearer")
		return
	case err != nil:
		c.count(OutcomeError)
		http.Error(w, "service unavailable: the tenant token could not be checked now; try again", http.StatusServiceUnavailable)
		return
	}
	if err := c.t.Allow(r, c.route(r), s); err != nil {
		c.count(OutcomeForbidden)
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	c.count(OutcomeAllowed)
	next.ServeHTTP(w, r.WithContext(WithScope(r.Context(), s)))
}

func (c *tenantCheck) count(outcome string) {
	if c.counted != nil {
		c.counted.WithLabelValues(outcome).Inc()
	}
}
