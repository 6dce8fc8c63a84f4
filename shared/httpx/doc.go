// Package httpx is the HTTP server every sluice process runs: /healthz
// (liveness), /readyz (every registered ready check passes), /metrics
// (Prometheus, from the registry handed in) and whatever the service
// registers with Handle (the /api/v1/ JSON API, /ui).
//
// The access rule (guard.go) holds for every listener: with a token, every
// path except /healthz and /readyz requires "Authorization: Bearer <token>"
// (or the token as a Basic password, for a browser), compared in constant
// time; without one, the server binds only a loopback address (a
// non-loopback one is refused at start unless InsecureNoAuth, which logs a
// warning) and answers only requests whose Host names loopback with the
// port they reached (against DNS rebinding). Beside the operator token, a
// server with one may take tenant tokens (scope.go, Server.SetTenants): a
// credential with the tenant prefix is verified by the caller's Verify and
// served only where the caller's Allow accepts the route pattern the mux
// chose (default deny), with its Scope in the request context. httpx must
// never log a token or request headers, and never serve the global
// Prometheus registry.
//
// NOTES: the listener is bound by the first of Addr or Run, so Addr can be
// called before or after Run starts and always names the bound address
// (listen may be ":0").
package httpx
