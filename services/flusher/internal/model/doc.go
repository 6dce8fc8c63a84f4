// Package model is an explicit-state model checker of the flusher's
// delivery protocol: it drives the production core (package core) — the
// same code the flusher runs — with a small model of its environment (the
// ROUTED partition consumer of JetStream, the partition lease, the cursor
// table, the pack store and the PACKS stream) through every interleaving
// of a small configuration, breadth first, and checks the rules of
// INVARIANTS.md that belong to the protocol in every state and every
// transition. Replicas are interchangeable (symmetry reduction); states are
// stored as 64-bit hashes of a canonical encoding. A violation is reported
// with the shortest trace that reaches it.
//
// It must never model the protocol itself: every decision (what to buffer,
// nak or ack, which cursor to write, which step of a flush comes next) is
// the core's. The environment model only does what the shell and the
// outside world do.
package model
