// Package export writes a destination's copy of a table, as the catalog's
// read path returns it, into files a data tool opens directly: JSON lines
// (each line exactly the row `sluice read` prints), CSV (the cells `sluice
// read --format csv` prints), an Arrow IPC file and Parquet (arrow-go's
// pqarrow), the last two with each column in the Arrow type its kind travels
// as on the wire (proto.Kind.ArrowType).
//
// It owns only the conversion from rows to file formats. It never reads the
// catalog's tables itself: rows come page by page from a Pager, so the
// values in every format are those of the public read path, and it never
// holds more than one page.
package export
