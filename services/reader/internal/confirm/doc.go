// Package confirm owns the reader's confirmed LSN: the position it may
// report to Postgres as flushed, so that Postgres may recycle the WAL before
// it.
//
// Published messages are registered in publish order, each with the LSN it
// makes durable once it and every earlier message are stored (its
// Sluice-Through). Acks arrive out of order; the confirmed LSN is that of the
// longest fully acked prefix (min(unacked) - 1), never the largest acked one.
//
// confirm must never move the confirmed LSN backwards, and never past a
// message that is not acked. It does no I/O.
package confirm
