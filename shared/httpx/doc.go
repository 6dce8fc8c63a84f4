// Package httpx is the HTTP server every sluice process runs: /healthz
// (liveness), /readyz (every registered ready check passes), /metrics
// (Prometheus, from the registry handed in) and whatever the service
// registers with Handle (the /api/v1/ JSON API, /ui).
//
// When a token is configured every path except /healthz, /readyz and
// /metrics requires "Authorization: Bearer <token>", compared in constant
// time. httpx must never log the token or request headers, and never serve
// the global Prometheus registry.
//
// NOTES: the listener is bound by the first of Addr or Run, so Addr can be
// called before or after Run starts and always names the bound address
// (listen may be ":0").
package httpx
