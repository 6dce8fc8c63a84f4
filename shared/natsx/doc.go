// Package natsx is sluice's NATS JetStream runtime: the embedded server,
// connecting, provisioning the five streams, publishing (bounded async and
// retrying sync), the consume loop with its one error classifier, and the
// dead-letter stream.
//
// natsx must never interpret message bodies, never drop a message it could
// not process (a permanent failure is recorded on the dead-letter stream
// before the message is terminated; if recording fails the message is naked
// and redelivered), never log credentials, and never block forever: every
// wait honours its context.
//
// # Streams (StreamConfigs)
//
//	CHANGES  sluice.changes.>  reader -> router
//	ROUTED   sluice.routed.>   router -> flusher
//	PACKS    sluice.packs.>    flusher -> indexer
//	DLQ      sluice.dlq.>      any stage -> operator
//	REPLAY   sluice.replay.>   operator (sluice dlq replay) -> router
//
// All use file storage, nats.replicas replicas, limits retention with
// MaxAge = nats.max_age (DLQ: 7 days), MaxBytes = nats.max_bytes, discard
// new (a full stream refuses publishes, publishers retry with backoff:
// nothing unprocessed is ever dropped), a 2 minute duplicate window
// (Nats-Msg-Id), and MaxMsgSize = nats.max_payload. Limits retention rather
// than work-queue is deliberate: the publisher reads back the message at a
// consumer's ack floor to compute the snapshot frontier (ARCHITECTURE.md,
// Frontiers). Trim (run by the active publisher) purges what every
// required consumer has acked, keeping each ack-floor message and the
// last one, so the streams hold their backlog rather than max_bytes. REPLAY
// alone is a work queue: replays of router dead letters, read by no
// frontier, gone once the router acks them.
//
// # Error classification (Settler, used by Consume)
//
// Settler is the one classifier; Consume settles every message through
// one, and a stage that acks messages itself (the flusher, the indexer's
// batches) settles its failures through its own:
//
//	handler returns nil                -> Ack (unless ManualAck)
//	error wrapping ErrManualAck        -> nothing: the handler acks later
//	IsPermanent (Permanent(err), arrowcodec.ErrDecode, proto.ErrWireVersion,
//	  unknown Sluice-Wire major, recovered panic)
//	                                   -> DeadLetter.Send, then TermWithReason
//	                                      (Nak with backoff if the dead letter
//	                                      could not be stored)
//	anything else                      -> NakWithDelay(Backoff(NumDelivered))
//	consume context cancelled          -> Nak (prompt redelivery elsewhere)
//
// NOTES
//   - Every fetch is Fetch: a server-side expiry (FetchMaxWait), never a
//     FetchContext, whose end drops the messages already sent to it (they
//     stay ack-pending until AckWait).
//   - Consume fetches in bounded batches (ConsumeOptions.Fetch) and runs the
//     handler on one message at a time; run several Consume loops for
//     parallelism. Messages fetched but not yet handled when the context
//     ends are naked.
//   - A dead letter keeps the original body and headers; Nats-* headers
//     (msg id, expectations) are replaced so the DLQ publish cannot be
//     rejected or deduplicated by them. If body plus headers would exceed the
//     connection's max payload, the body is omitted (HeaderBodyOmitted); the
//     original stays in its source stream at Sluice-Orig-Stream/Seq.
//   - Publisher releases an in-flight slot when the ack future resolves or
//     after AckTimeout, whichever comes first, so a lost PubAck cannot wedge
//     it.
package natsx
