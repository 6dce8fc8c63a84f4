package flusher

// rules are the flusher's safety rules that an end-to-end negative control
// switches off (test/e2e negative_test.go). The zero value, every rule on,
// is production. Only a build with the sluice_unsafe tag reads the switches
// (unsafe.go; `make test` passes the tag to the tests that need it); the
// unit tests of internal/delivery set the Manager's knobs directly.
type rules struct {
	// scalarMaxCursor makes a destination's cursor the max flushed
	// position, ignoring what is still pending.
	scalarMaxCursor bool
	// dropRedelivered acks redelivered messages at or below the cursor
	// without flushing them. With scalarMaxCursor it loses changes.
	dropRedelivered bool
}
