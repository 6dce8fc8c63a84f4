// Package stack assembles what a sluice process runs on: telemetry, the
// NATS connection (and the embedded server in `sluice dev`), the state
// database, the catalog connection, the pack store and the HTTP server. The
// services get their dependencies from here; stack owns their lifetimes and
// closes them in reverse order.
//
// stack must never hold business logic: it opens and closes things.
package stack
