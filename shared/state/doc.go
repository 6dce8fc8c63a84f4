// Package state owns sluice's durable coordination state in Postgres, in one
// schema (config state.schema, default "sluice"): term-fenced leases and
// per-destination cursors.
//
// Leases. A lease is a named row (e.g. "reader/<slot>", "flusher-p3",
// "publisher") with a holder, a term and an expiry. Expiry is judged only by
// the Postgres server's clock (now()), never by a process's own clock, so
// skewed clocks cannot make two holders both believe they are live. Every
// successful Acquire increments the term, also when the same holder
// re-acquires: a restarted process that reuses its holder name still fences
// off its previous incarnation. Renew extends a live lease of the same
// holder and term; once another holder has taken over, Renew returns
// ErrLeaseLost forever. Held and HeldMany (one statement for many) say
// whether holdings are still live without extending them, the check right
// before acting as owner; Now is the server clock itself. No other package
// writes SQL against the leases table.
//
// Cursors. A cursor is the per-destination position up to which everything
// is durably in packs. Cursors.Advance is one statement that is
//   - fenced: it writes only while the caller's lease (holder, term) is live
//     by the server clock, locking the lease row FOR SHARE so a takeover
//     waits for it and an Advance after the takeover fails (ErrLeaseLost);
//   - monotonic: ON CONFLICT ... WHERE (lsn, seq) <= EXCLUDED, so a stale or
//     replayed write never moves a cursor back (advanced=false, no error).
//
// TracedCursors (cursor_trace.go) is the tracing decorator the flusher
// writes its cursors through: a span per Advance and AdvanceMany with the
// outcome (stale, error); Cursors itself holds no instrumentation.
//
// Destination states (destinations.go). An operator-set lifecycle state per
// destination (active, paused, draining, drained, retired) with a
// transition table enforced inside one transaction, and a version from a
// sequence; writers serialize on an advisory lock so versions commit in
// order and a poller asking for version > last never skips a row.
// DestinationCache is the pollers' lock-free copy; its Run loop belongs to
// the caller's goroutine and calls the OnChange and OnRefresh hooks.
//
// Tenant tokens (tokens.go). Tokens creates "slt_<id>_<secret>" tokens
// that read one destination, storing only SHA-256 of the secret; Verify
// looks one up by id, compares in constant time and judges expiry by the
// server clock; nothing is cached, so a revocation holds from the next
// Verify. A token's plaintext is returned by Create once and never stored.
//
// Migrate creates the schema idempotently; concurrent migrations serialize
// on an advisory lock. MigrateTables creates a component's own tables (the
// reader's) under the same lock. A database whose schema_version is newer than this
// build is refused with ErrSchemaVersion.
//
// state must never judge expiry with the local clock, never move a cursor
// backwards, and never write a cursor outside the fence. It holds no
// goroutines of its own and caches nothing but DestinationCache (tokens included): every
// other call is one round trip (two on the rare refused-Advance path), on
// the pool the caller passes.
//
// NOTES
//   - proto.LSN is uint64 but stored as bigint: an LSN or seq at or above
//     2^63 is refused with ErrPositionRange (Postgres LSNs stay far below).
//   - Advance of an equal position rewrites the row (term, updated_at) and
//     reports advanced=true: the cursor is at pos.
//   - Release of a lease that is already lost is not an error.
package state
