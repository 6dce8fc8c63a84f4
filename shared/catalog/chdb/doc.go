// Package chdb is the driver of the embedded ClickHouse engine: libchdb.so
// located (FindLibchdb) and loaded in-process through purego on the first
// Open, one engine per process shared by every handle on its directory
// (Conn), engine errors as *Exception, and the Native-format decoding and
// value normalization (Result, Normalize) that the catalog's server backend
// shares, so a value reads the same on either backend.
//
// Starting the engine installs libchdb's own handlers for the synchronous
// fault signals, after which a Go nil dereference would hang instead of
// panicking; the driver puts the Go runtime's handler back
// (signals_linux.go, TestNilDerefRecoversAfterChDB and its negative control
// TestNilDerefNegativeControl).
//
// Package catalog uses it as one of the two backends behind catalog.Conn.
package chdb
