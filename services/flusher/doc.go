// Package flusher is the flusher service: a component with Run(ctx) that its
// own binary (cmd/flusher) and `sluice dev` both call. It owns a fair share
// of the ROUTED partitions through fenced Postgres leases, buffers each
// destination's changes, and flushes them as immutable packs; the engine is
// internal/delivery, resolution internal/resolve.
//
// flusher must never ack a ROUTED message before its pack is durable and
// its destination's cursor is written under the partition lease.
package flusher
