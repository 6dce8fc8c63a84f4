package reader

// rules are the reader's safety rules that an end-to-end negative control
// switches off. The zero value, every rule on, is production. Only a build
// with the sluice_unsafe tag reads the switches (unsafe.go; `make test`
// passes the tag to the tests that need it); the unit tests of this package
// set the fields directly.
type rules struct {
	// scalarMax confirms max(acked) instead of the prefix-complete LSN.
	scalarMax bool
	// unchained publishes without the Nats-Expected-Last-Sequence chain, the
	// ordering guard that keeps acks in order.
	unchained bool
	// noHighWatermark publishes every row of a resync chunk, even those the
	// stream changed inside the chunk's window (capture/resync.go).
	noHighWatermark bool
	// noAutoResync ignores schema changes that rewrite rows without WAL
	// (capture/schemachange.go): the older rows keep their old values.
	noAutoResync bool
	// noKnownKinds compares a Relation message's column kinds only with the
	// session's previous Relation (capture/kinds.go): a type changed before
	// the table's first change in a session streams under the new kind.
	noKnownKinds bool
	// noPublicationCheck leaves the publication out of the periodic schema
	// check (publication.go): one altered while running captures a subset.
	noPublicationCheck bool
	// noSlotFailover creates the slot without FAILOVER true and never
	// alters it (failover.go): a promoted standby has no copy of it, and
	// every table is copied again (slot_lost).
	noSlotFailover bool
	// replayAborted replays the changes of a streamed transaction's aborted
	// subtransactions at its commit (capture/spill.go): a rolled-back
	// savepoint's rows arrive.
	replayAborted bool
	// noReplayWait reads a resync chunk on a standby source without waiting
	// until the standby replayed the chunk's low watermark (standby.go): the
	// chunk may miss commits the stream delivers before the LW.
	noReplayWait bool
}
