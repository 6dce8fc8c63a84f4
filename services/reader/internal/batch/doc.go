// Package batch owns the Arrow shape of the reader's CHANGES messages: the
// schema of a table's batches (its columns by kind, then the system columns
// of proto/columns.go, with the table, key and routing metadata) and the
// builder that appends decoded rows and cuts them into record batches.
//
// batch converts values through an injected AppendText (shared/pgtypes in
// production) and never decides when to cut: the caller does, from Rows and
// Bytes, so cuts stay a pure function of the change stream.
package batch
