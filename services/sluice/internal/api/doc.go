// Package api is the HTTP API under /api/v1/ and the status page /ui that
// the CLI and people use: status, snapshots, pinned reads with keyset
// pagination, and the operator's actions (lifecycle, resyncs, purges, pins,
// dead letters). It validates every parameter (destination and table names
// before they reach SQL); every call that changes state passes one request
// guard (guard.go), whether the CLI or the status page's buttons make it.
// A tenant token (tokens.go) reaches only tenantRoutes, for its own
// destination; httpx refuses it every other route before any handler runs.
package api
