// Package router is the router service: a component with Run(ctx) that its
// own binary (cmd/router) and `sluice dev` both call. It owns the durable
// consumer "router" on CHANGES, and "router-replay" on REPLAY (router dead
// letters replayed by `sluice dlq replay`, handled exactly like CHANGES
// batches), and turns every batch of a shared source
// table into one message per partition on ROUTED (sluice.routed.<partition>:
// the rows of every destination of the partition, grouped by destination,
// each row's destination in _sluice_destination), unroutable rows into one
// dead letter per batch on sluice.dlq.router.
//
// The router is stateless: any number of replicas share the durable
// consumer, and a replica killed at any instant loses nothing — an input is
// acked only after every one of its outputs is stored, a redelivered input
// republishes the same Nats-Msg-Ids, and JetStream drops the duplicates.
//
// router must never ack an input before its outputs are stored, never route
// a row anywhere but the destination its own routing value names, and never
// let one bad batch or tenant stop the others (bad input is dead-lettered).
//
// Layout: internal/split is the vectorized split (pure, no I/O);
// internal/route is the message handler (decode, split, encode, publish,
// dead-letter, metrics, spans); this package wires the consumer and the
// consume loops.
//
// NOTES
//   - Workers (router.workers) consume loops share one durable consumer;
//     each handles one message at a time.
//   - Split output buffers come from a bounded pool (split.Pool, 256 MiB of
//     free buffers at most) and go back to it once a batch's outputs are
//     published.
//   - The route span is a direct child of the reader's span (extracted
//     from the input headers); natsx's "process router" span is its sibling.
package router
