package proto

import (
	"github.com/apache/arrow-go/v18/arrow"
)

// A pack is one immutable Arrow IPC file per (destination, table, flush). Its
// schema metadata (written in the file footer) carries these keys; its rows
// carry the table's columns and the system columns. Packs live at
// <destination>/<table>/<pack_id>.arrow in the pack store.
const (
	PackFormatVersion = "1"

	MetaPackFormat      = "sluice.pack.format"
	MetaPackID          = "sluice.pack.id"
	MetaPackStoreID     = "sluice.pack.store_id"
	MetaPackDestination = "sluice.pack.destination"
	MetaPackTable       = "sluice.pack.table"
	MetaPackSchema      = "sluice.pack.schema" // schema fingerprint of the rows
	MetaPackFirst       = "sluice.pack.first"  // Position.String
	MetaPackLast        = "sluice.pack.last"
	MetaPackRows        = "sluice.pack.rows"
	MetaPackTombstones  = "sluice.pack.tombstones"
	// MetaPackChecksum is the file's integrity check: "xxh3:" and 16
	// lowercase hex digits, the XXH3-64 of the whole file with those 16
	// digits (in the leading schema message and in the footer, where the
	// key sits beside the others) read as "0". Every file written since
	// docs/adr/0032-pack-checksums.md carries it; a file without it is
	// read unchecked, as before.
	MetaPackChecksum = "sluice.pack.checksum"
)

// PackPath is the store-relative path of a pack.
func PackPath(destination, table, packID string) string {
	return destination + "/" + table + "/" + packID + ".arrow"
}

// PackEventSchema is the schema of the Arrow IPC body of a pack event on
// PACKS: enough for an indexer to find and check the pack. A per-destination
// pack's event has one row; a segment's event (SegmentEventSubject) has one
// row per destination it holds, in the segment's row order, each with the
// segment's pack_id, store_id, table, path, schema and bytes and that
// destination's first, last, rows and tombstones.
var PackEventSchema = arrow.NewSchema([]arrow.Field{
	{Name: "pack_id", Type: arrow.BinaryTypes.String},
	{Name: "store_id", Type: arrow.BinaryTypes.String},
	{Name: "destination", Type: arrow.BinaryTypes.String},
	{Name: "table", Type: arrow.BinaryTypes.String},
	{Name: "path", Type: arrow.BinaryTypes.String},
	{Name: "schema", Type: arrow.BinaryTypes.String},
	{Name: "first", Type: arrow.BinaryTypes.String},
	{Name: "last", Type: arrow.BinaryTypes.String},
	{Name: "rows", Type: arrow.PrimitiveTypes.Int64},
	{Name: "tombstones", Type: arrow.PrimitiveTypes.Int64},
	{Name: "bytes", Type: arrow.PrimitiveTypes.Int64},
}, nil)
