// Package proto is sluice's wire contract as code: stream and subject names,
// durable consumer names, message headers, how every Nats-Msg-Id is derived,
// the reserved system columns, positions, destination names and partitions,
// and the pack footer keys. WIRE.md beside this file is the same contract in
// prose; a change to one is a change to the other.
//
// proto holds no I/O and no state. It must never import another sluice
// module: every service depends on it, and it depends on nothing but the
// standard library and Arrow.
package proto
