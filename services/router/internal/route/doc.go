// Package route is the router's message handler: it turns one CHANGES
// message into one ROUTED message per destination and, for unroutable rows,
// one dead letter.
//
// For each message: ticks are acked with no output; the wire version is
// checked; the body is decoded; the batch is split (internal/split); every
// destination's rows are encoded (split further if the body would exceed the
// payload limit) and published asynchronously to
// sluice.routed.<partition>.<destination> with a Nats-Msg-Id derived from
// the input's; unroutable rows go to sluice.dlq.router as one Arrow batch
// with Sluice-Reason; the handler returns nil (so natsx.Consume acks the
// input) only after every PubAck and the dead letter are in. A failed
// publish returns a transient error: natsx naks with backoff and the
// redelivered input republishes the same ids, which JetStream drops as
// duplicates. An undecodable body, an unknown wire major or a batch the
// split refuses is permanent: natsx dead-letters the whole message.
//
// route must never ack (or let Consume ack) an input before every output is
// stored, never publish a row to a destination other than the one its own
// routing value names, and never block past its context plus the drain
// bound.
//
// NOTES
//   - Encoding: every destination's body is encoded by up to EncodeWorkers
//     goroutines (default GOMAXPROCS) taking parts in order from a shared
//     counter, then published in part order. The bodies are byte for byte
//     arrowcodec.Encode's, but the schema message is built once per input
//     batch and each body is assembled in a per-worker scratch buffer
//     (encoder.go): at 10K destinations per batch this cut the encode CPU by
//     ~30% (BenchmarkHandleWork), and encoding still costs ~2x the split.
//   - A body that cannot fit under the payload limit even as a single row is
//     permanent (the reader cuts batches well below the limit, so this means
//     the limit shrank).
//   - Oversized parts are halved by rows until they fit; their ids are the
//     part's id with ":<index>" appended (deterministic for a given limit).
//   - Once a batch starts publishing it finishes (bounded by DrainTimeout)
//     even when the consume context ends, so a graceful shutdown acks what
//     it published instead of leaving duplicates to be dropped.
package route
