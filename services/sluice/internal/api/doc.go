// Package api is the HTTP API under /api/v1/ and the status page /ui that
// the CLI and people use: status, snapshots, pinned reads with keyset
// pagination. It validates every parameter (destination and table names
// before they reach SQL) and never writes.
package api
