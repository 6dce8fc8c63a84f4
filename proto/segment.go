package proto

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// ColDestination names each row's destination in a partition message on
// ROUTED and in a segment: the rows of one message or segment are grouped
// by destination, each destination's rows contiguous. It is a system
// column (SystemPrefix), so no source column can take the name.
const ColDestination = "_sluice_destination" // utf8, or dictionary<int32, utf8>

// RoutedPartitionSubject is the ROUTED subject of one partition: one message
// per (change batch, partition) carries the rows of every destination of the
// partition in the batch (ColDestination says whose each row is).
func RoutedPartitionSubject(partition int) string {
	return "sluice.routed." + strconv.Itoa(partition)
}

// PartitionMsgID names the output of one input batch for one partition; a
// replayed batch gets the same id and dedupes.
func PartitionMsgID(inputMsgID string, partition int) string {
	return "r:" + inputMsgID + ":p" + strconv.Itoa(partition)
}

// A DestinationRun is one destination's rows [Lo, Hi) of a batch grouped by
// destination.
type DestinationRun struct {
	Destination string
	Lo, Hi      int64
}

// DestinationRuns returns the runs of rec's ColDestination column (utf8 or a
// utf8 dictionary) and the column's index. Every destination must form one
// contiguous run, every row must name a valid destination: a batch that
// breaks either is refused (the router groups by destination, so this is
// damage, not a state to cope with).
func DestinationRuns(rec arrow.RecordBatch) (runs []DestinationRun, col int, err error) {
	idx := rec.Schema().FieldIndices(ColDestination)
	if len(idx) != 1 {
		return nil, -1, fmt.Errorf("batch has %d %s columns, want 1", len(idx), ColDestination)
	}
	col = idx[0]
	var at func(i int) (string, bool)
	switch c := rec.Column(col).(type) {
	case *array.String:
		at = func(i int) (string, bool) { return c.Value(i), c.IsValid(i) }
	case *array.Dictionary:
		dict, ok := c.Dictionary().(*array.String)
		if !ok {
			return nil, col, fmt.Errorf("%s dictionary is %s, want utf8", ColDestination, c.Dictionary().DataType())
		}
		at = func(i int) (string, bool) {
			if !c.IsValid(i) {
				return "", false
			}
			return dict.Value(c.GetValueIndex(i)), true
		}
	default:
		return nil, col, fmt.Errorf("%s column is %s, want utf8 or a utf8 dictionary", ColDestination, rec.Column(col).DataType())
	}
	n := int(rec.NumRows())
	// The router writes the runs sorted by name within a partition, so a
	// run whose name is greater than the one before cannot repeat an
	// earlier one: the set of names seen is built only once a run breaks
	// that order.
	var seen map[string]struct{}
	for i := 0; i < n; {
		d, ok := at(i)
		if !ok {
			return nil, col, fmt.Errorf("row %d has no %s", i, ColDestination)
		}
		if seen == nil && len(runs) > 0 && d <= runs[len(runs)-1].Destination {
			seen = make(map[string]struct{}, 2*len(runs))
			for _, r := range runs {
				seen[r.Destination] = struct{}{}
			}
		}
		if seen != nil {
			if _, dup := seen[d]; dup {
				return nil, col, fmt.Errorf("destination %q is not contiguous (row %d)", d, i)
			}
			seen[d] = struct{}{}
		}
		if d == ClearAllDestinations {
			// a table-wide clear on ROUTED: the flusher expands it
		} else if err := ValidateDestination(d); err != nil {
			return nil, col, fmt.Errorf("row %d: %w", i, err)
		}
		j := i + 1
		for ; j < n; j++ {
			if e, ok := at(j); !ok || e != d {
				break
			}
		}
		runs = append(runs, DestinationRun{Destination: d, Lo: int64(i), Hi: int64(j)})
		i = j
	}
	return runs, col, nil
}

// A segment is one immutable Arrow IPC file per (table, schema) of one group
// commit of a flusher: the resolved rows of every destination the group
// flushed, grouped by destination (ColDestination), with a footer listing
// each destination's row range, first and last position, rows and
// tombstones (MetaPackDestinations). It is a pack of format
// SegmentFormatVersion: its id is its pack id, one PACKS event announces it,
// one catalog statement indexes it, one inventory row per destination it
// holds records it.
const (
	SegmentFormatVersion = "2"
	// MetaPackDestinations is the footer key of a segment's destination
	// index: a JSON array of SegmentEntry, in row order.
	MetaPackDestinations = "sluice.pack.destinations"
	// SegmentsDir is the top directory of segments in the pack store. It
	// starts with a dot, so it is no destination, and listings of the
	// per-destination pack layout skip it.
	SegmentsDir = ".seg"
)

// SegmentEntry is one destination's slice of a segment (JSON in the footer).
type SegmentEntry struct {
	Destination string `json:"d"`
	Lo          int64  `json:"lo"`    // first row index in the file
	Rows        int64  `json:"rows"`  // rows [Lo, Lo+Rows)
	Tombstones  int64  `json:"tombs"` // of those rows
	First       string `json:"first"` // Position.String
	Last        string `json:"last"`
}

// SegmentID names a segment: the UTC time it was cut (nanoseconds, fixed
// width, so ids sort by time), the writer (a store-path-safe token unique
// per flusher process) and an ordinal among the writer's segments of the
// same instant. Time first, so a store listing in path order is in time
// order.
func SegmentID(t time.Time, writer string, n uint64) string {
	return fmt.Sprintf("%019d-%s-%d", t.UTC().UnixNano(), writer, n)
}

// SegmentTime is the time a segment id names.
func SegmentTime(id string) (time.Time, error) {
	ns, _, ok := strings.Cut(id, "-")
	if !ok || len(ns) != 19 {
		return time.Time{}, fmt.Errorf("segment id %q: no time prefix", id)
	}
	v, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("segment id %q: %w", id, err)
	}
	return time.Unix(0, v).UTC(), nil
}

// SegmentHourDir is the store directory of the segments cut in t's UTC hour:
// listing "everything since T" is a listing of T's hour and every later one.
func SegmentHourDir(t time.Time) string {
	return SegmentsDir + "/" + t.UTC().Format("2006-01-02/15")
}

// SegmentPath is the store-relative path of segment id for table: under its
// hour, the table a directory (as in the pack layout), the id the file name.
func SegmentPath(id, table string) (string, error) {
	t, err := SegmentTime(id)
	if err != nil {
		return "", err
	}
	return SegmentHourDir(t) + "/" + table + "/" + id + ".arrow", nil
}

// SegmentEventSubject is the PACKS subject of a segment's event: the table
// (two tokens, schema.table), which no destination subject (one token) can
// be.
func SegmentEventSubject(table string) string { return "sluice.packs." + table }
