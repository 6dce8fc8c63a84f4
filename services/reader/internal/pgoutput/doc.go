// Package pgoutput decodes the messages of Postgres' pgoutput logical
// decoding plugin, protocol version 1: Begin, Commit, Origin, Relation, Type,
// Insert, Update, Delete, Truncate and Message; and of version 2 the
// streaming of in-progress transactions: Stream Start, Stop, Commit and
// Abort, and the xid a message inside a stream block carries (StreamedXid).
//
// It owns only the byte format. Decoding is zero-copy: a decoded tuple's
// values alias the input buffer and are valid only until the caller reuses
// that buffer, which keeps the hot path free of allocations (pglogrepl's
// decoder copies every value byte by byte).
//
// pgoutput must never panic on malformed input: every read is bounds
// checked and returns ErrMalformed (see the fuzz test, which also compares
// every decode with github.com/jackc/pglogrepl's).
package pgoutput
