// Package resolve owns the flusher's resolution step: given the batches one
// destination buffered for one table and schema, keep per primary key only
// the row with the newest position. A tombstone is an ordinary row here: if
// it is the newest version of its key it is kept, never cancelled away with
// the insert before it. TOAST-unchanged markers (_sluice_unchanged) travel
// untouched with their row; filling unchanged columns from older versions is
// the catalog's job.
//
// Plan decides over slices read in place (Span: rows of a shared message
// batch), returning the surviving rows (Ref) without copying; Gather makes
// rows of many spans one batch, each batch read once; Resolve is the two
// over whole batches.
//
// resolve must never reorder or alter values of the rows it keeps, and never
// drop a key's newest version. It is pure: no I/O, no goroutines.
package resolve
