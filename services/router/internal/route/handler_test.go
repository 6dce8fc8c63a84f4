package route

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/router/internal/split"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
)

// TestEncodePartitions: a batch becomes one message per partition it
// touches, on RoutedPartitionSubject with PartitionMsgID, whose body is the
// partition's destinations' rows grouped by destination (sorted by name)
// plus a last ColDestination column: proto.DestinationRuns finds exactly the
// split's parts, and each run with ColDestination dropped is the part's rows
// (what a per-destination message carried). Headers: rows, runs
// (Sluice-Destinations), first/last over the message, no
// Sluice-Destination. Encoding on several workers yields exactly the serial
// messages; under a payload limit the pieces (ids ":k", in order) each fit,
// say their own rows, runs and span, and together are the message; a limit
// no row fits fails the batch with the same error either way. Both
// ColDestination encodings.
func TestEncodePartitions(t *testing.T) {
	for _, dict := range []bool{false, true} {
		t.Run(fmt.Sprintf("dictionary=%v", dict), func(t *testing.T) {
			defer func(v bool) { destDictionary = v }(destDictionary)
			destDictionary = dict
			encodePartitionsCase(t)
		})
	}
}

func encodePartitionsCase(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rec := benchBatch(t, mem, 3000, 60)
	defer rec.Release()
	const partitions = 8
	h0 := New(Options{Partitions: partitions})
	res, err := split.New(mem, split.Auto(), 2).SplitBy(rec, h0.rank)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	base := nats.Header{}
	base.Set(proto.HeaderTable, "public.orders")
	byPartition := map[int][]split.Part{}
	for _, p := range res.Parts {
		n := proto.Partition(p.Destination, partitions)
		byPartition[n] = append(byPartition[n], p)
	}
	if len(byPartition) < 2 {
		t.Fatalf("%d partitions touched", len(byPartition))
	}

	for _, maxPayload := range []int{0, 4 << 10} { // 4 KiB: most partitions are cut
		serial := New(Options{Partitions: partitions, MaxPayload: maxPayload, EncodeWorkers: 1})
		parallel := New(Options{Partitions: partitions, MaxPayload: maxPayload, EncodeWorkers: 3})
		want, err := serial.encodePartitions("in-1", base, res, res.Parts)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parallel.encodePartitions("in-1", base, res, res.Parts)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("max payload %d: %d messages in parallel, %d serially", maxPayload, len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Subject != w.Subject || g.Header.Get(proto.HeaderMsgID) != w.Header.Get(proto.HeaderMsgID) ||
				g.Header.Get(proto.HeaderFirst) != w.Header.Get(proto.HeaderFirst) || !bytes.Equal(g.Data, w.Data) {
				t.Fatalf("max payload %d: message %d differs: %s %v vs %s %v", maxPayload, i, g.Subject, g.Header, w.Subject, w.Header)
			}
		}
		if maxPayload == 0 && len(got) != len(byPartition) {
			t.Fatalf("%d messages for %d partitions", len(got), len(byPartition))
		}
		if maxPayload != 0 && len(got) <= len(byPartition) {
			t.Fatalf("max payload %d: %d messages for %d partitions: nothing was cut", maxPayload, len(got), len(byPartition))
		}
		// Per partition, its messages in order are its parts.
		seen := map[int]int{}
		var rows []arrow.RecordBatch // the current partition's runs, in order
		var dests []string
		flush := func(n int) {
			parts := byPartition[n]
			merged := mergeRuns(t, mem, dests, rows)
			if len(merged) != len(parts) {
				t.Fatalf("partition %d: %d destinations, want %d", n, len(merged), len(parts))
			}
			for k, p := range parts {
				if merged[k].dest != p.Destination || !array.RecordEqual(merged[k].rec, p.Batch) {
					t.Fatalf("partition %d run %d: %s (%d rows), want %s (%d rows)", n, k, merged[k].dest, merged[k].rec.NumRows(), p.Destination, p.Batch.NumRows())
				}
				merged[k].rec.Release()
			}
			for _, r := range rows {
				r.Release()
			}
			rows, dests = nil, nil
		}
		last := -1
		for _, m := range got {
			n, err := strconv.Atoi(m.Subject[len("sluice.routed."):])
			if err != nil || proto.RoutedPartitionSubject(n) != m.Subject {
				t.Fatalf("subject %s", m.Subject)
			}
			if n != last && last >= 0 {
				flush(last)
			}
			if n != last && seen[n] > 0 {
				t.Fatalf("partition %d's messages are not consecutive", n)
			}
			wantID := proto.PartitionMsgID("in-1", n)
			if maxPayload != 0 {
				wantID += ":" + strconv.Itoa(seen[n])
			}
			if id := m.Header.Get(proto.HeaderMsgID); id != wantID {
				t.Fatalf("msg id %s, want %s", id, wantID)
			}
			seen[n]++
			last = n
			if maxPayload != 0 && len(m.Data)+headerSize(m.Header) > maxPayload {
				t.Fatalf("message %s: %d bytes over the %d limit", wantID, len(m.Data)+headerSize(m.Header), maxPayload)
			}
			if m.Header.Get(proto.HeaderDestination) != "" {
				t.Fatalf("message %s has a %s header", wantID, proto.HeaderDestination)
			}
			body, err := arrowcodec.Decode(m.Data, mem)
			if err != nil {
				t.Fatal(err)
			}
			runs, col, err := proto.DestinationRuns(body)
			if err != nil {
				t.Fatal(err)
			}
			if col != int(body.NumCols())-1 {
				t.Fatalf("%s is column %d of %d", proto.ColDestination, col, body.NumCols())
			}
			first, lastPos := split.Span(body)
			if m.Header.Get(proto.HeaderRows) != strconv.FormatInt(body.NumRows(), 10) ||
				m.Header.Get(proto.HeaderDestinations) != strconv.Itoa(len(runs)) ||
				m.Header.Get(proto.HeaderFirst) != first.String() || m.Header.Get(proto.HeaderLast) != lastPos.String() {
				t.Fatalf("message %s headers %v; body %d rows, %d runs, %v..%v", wantID, m.Header, body.NumRows(), len(runs), first, lastPos)
			}
			fields := body.Schema().Fields()[:col]
			md := body.Schema().Metadata()
			table := array.NewRecordBatch(arrow.NewSchema(fields, &md), body.Columns()[:col], body.NumRows())
			if fp := arrowcodec.Fingerprint(table.Schema()); fp != arrowcodec.Fingerprint(rec.Schema()) {
				t.Fatalf("rows without %s: schema %s, want the table's %s", proto.ColDestination, fp, arrowcodec.Fingerprint(rec.Schema()))
			}
			for _, r := range runs {
				rows = append(rows, table.NewSlice(r.Lo, r.Hi))
				dests = append(dests, r.Destination)
			}
			table.Release()
			body.Release()
		}
		flush(last)
	}

	// A limit no single row fits under: the batch fails, permanently, with
	// the first partition's error in partition order whatever the worker
	// count.
	serial := New(Options{Partitions: partitions, MaxPayload: 300, EncodeWorkers: 1})
	parallel := New(Options{Partitions: partitions, MaxPayload: 300, EncodeWorkers: 3})
	_, werr := serial.encodePartitions("in-1", base, res, res.Parts)
	_, gerr := parallel.encodePartitions("in-1", base, res, res.Parts)
	if !errors.Is(werr, ErrTooLarge) || gerr == nil || gerr.Error() != werr.Error() {
		t.Fatalf("parallel error %v, serial %v", gerr, werr)
	}
}

type destRows struct {
	dest string
	rec  arrow.RecordBatch
}

// mergeRuns joins consecutive runs of one destination (a payload cut can
// split a destination's rows over two messages).
func mergeRuns(t *testing.T, mem memory.Allocator, dests []string, recs []arrow.RecordBatch) []destRows {
	t.Helper()
	var out []destRows
	for i := 0; i < len(recs); {
		j := i + 1
		for j < len(recs) && dests[j] == dests[i] {
			j++
		}
		tbl := array.NewTableFromRecords(recs[i].Schema(), recs[i:j])
		cols := make([]arrow.Array, tbl.NumCols())
		for c := range cols {
			a, err := array.Concatenate(tbl.Column(c).Data().Chunks(), mem)
			if err != nil {
				t.Fatal(err)
			}
			cols[c] = a
		}
		r := array.NewRecordBatch(recs[i].Schema(), cols, tbl.NumRows())
		for _, c := range cols {
			c.Release()
		}
		tbl.Release()
		out = append(out, destRows{dests[i], r})
		i = j
	}
	return out
}
