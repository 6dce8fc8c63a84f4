// Package arrowcodec is the body format of every sluice NATS message: one
// self-contained Arrow IPC stream holding the schema and exactly one record
// batch. It also computes schema fingerprints (Sluice-Schema header, pack
// footer).
//
// arrowcodec owns the encoding only. It must never interpret rows, never
// hold a record after returning it (the caller owns and releases what Decode
// returns), and never panic on bad input: every failure to read a body wraps
// ErrDecode, which consumers classify as permanent (dead-letter).
//
// NOTES
//   - Compression: bodies are written uncompressed by default; see
//     Compression and the numbers in the package report/benchmarks. Decode reads
//     either form (the IPC stream names its codec).
//   - Decode refuses bodies over MaxBodySize and validates every array
//     (array.ValidateRecordFull), so a corrupt body fails here, not later in
//     a consumer that trusts offsets.
//   - Fingerprint covers field names, Arrow types, nullability and the
//     sluice.kind / sluice.pgtype field metadata, in order; schema-level
//     metadata (table, primary key) is not part of it.
package arrowcodec
