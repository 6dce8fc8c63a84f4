package delivery

import "errors"

var (
	// ErrPartitionLost: the partition's lease was lost; the flush is dropped
	// without acking anything.
	ErrPartitionLost = errors.New("partition lease lost")
	// ErrHalted: the destination is halted by a permanent failure.
	ErrHalted = errors.New("destination halted")
	// ErrBadMessage: a ROUTED message that can never be flushed (bad
	// subject, wire version, body). It is dead-lettered.
	ErrBadMessage = errors.New("bad routed message")
)
