//go:build sluice_unsafe

package delivery

// Unsafe switches safety rules off for process-level negative-control tests
// only: scalarMax makes the cursor the max flushed position (ignoring what
// is still pending), dropRedelivered acks redelivered messages at or below
// the cursor without flushing them. Together they lose changes.
func (m *Manager) Unsafe(scalarMax, dropRedelivered bool) {
	m.scalarMaxCursor, m.dropRedelivered = scalarMax, dropRedelivered
}
