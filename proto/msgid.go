package proto

import "strconv"

// Every Nats-Msg-Id is a pure function of what the message carries, so that a
// publish replayed after a crash carries the same id and JetStream drops it
// inside the stream's duplicate window. Outside that window apply is
// idempotent anyway: the newest position per key wins.

// ChangesMsgID names a CHANGES batch by its table and its position range.
// A reader restarted after a crash re-cuts the same transaction into the same
// batches (cuts depend on rows and bytes, never on time, inside a
// transaction), so it republishes the same ids.
func ChangesMsgID(table string, first, last Position) string {
	return "c:" + table + ":" + first.String() + ":" + last.String()
}

// ClearMsgID names a clear (OpClear) of table at pos on CHANGES: scope is
// "" for every destination, else the one destination it clears.
func ClearMsgID(table, scope string, pos Position) string {
	return "x:" + table + ":" + pos.String() + ":" + scope
}

// TickMsgID names the reader's idle tick at lsn.
func TickMsgID(lsn LSN) string { return "t:" + lsn.String() }

// RoutedMsgID names the output of one input batch for one destination.
func RoutedMsgID(inputMsgID, destination string) string {
	return "r:" + inputMsgID + ":" + destination
}

// PackMsgID names a pack event: the pack id itself.
func PackMsgID(packID string) string { return "p:" + packID }

// DLQMsgID names a dead letter by where the poison message was.
func DLQMsgID(stage, stream string, seq uint64) string {
	return "d:" + stage + ":" + stream + ":" + strconv.FormatUint(seq, 10)
}
