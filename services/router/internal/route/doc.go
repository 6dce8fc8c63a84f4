// Package route is the router's message handler: it turns one CHANGES
// message into one ROUTED message per partition it touches and, for
// unroutable rows, one dead letter.
//
// For each message: ticks are acked with no output; the wire version is
// checked; the body is decoded; the batch is split (internal/split,
// SplitBy, ranked by partition, retired destinations last and dropped);
// every partition's rows (one window of the split, each destination's rows
// one run) are encoded with a last _sluice_destination column (split
// further if the body would exceed the payload limit) and published
// asynchronously to sluice.routed.<partition> with a Nats-Msg-Id derived
// from the input's (proto.PartitionMsgID); unroutable rows go to sluice.dlq.router as one Arrow batch
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
//   - Encoding: the partitions' bodies are encoded by up to EncodeWorkers
//     goroutines (default GOMAXPROCS) taking partitions in order from a
//     shared counter, then published in partition order (partition.go).
//     _sluice_destination is a dictionary<int32, utf8> column (one entry per
//     destination of the message; BenchmarkPartitionWire measured it against
//     utf8 and one IPC record per destination, docs/adr/0016-segments.md).
//     A dictionary-free schema's bodies take the pre-built schema message
//     and per-worker scratch of encoder.go.
//   - A body that cannot fit under the payload limit even as a single row is
//     permanent (the reader cuts batches well below the limit, so this means
//     the limit shrank).
//   - Oversized partition messages are halved by rows until they fit (a
//     destination's rows may span two pieces, each piece a run); their ids
//     are the message's id with ":<index>" appended (deterministic for a
//     given limit).
//   - Once a batch starts publishing it finishes (bounded by DrainTimeout)
//     even when the consume context ends, so a graceful shutdown acks what
//     it published instead of leaving duplicates to be dropped.
package route
