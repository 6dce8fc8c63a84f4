package route

import (
	"fmt"
	"maps"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/router/internal/split"
	"github.com/sluice-cdc/sluice/shared/natsx"
)

// retiredRank ranks a retired destination's part after every partition:
// the split lays it out after every partition's window, so dropping it
// leaves each partition's parts one contiguous window.
const retiredRank = math.MaxInt

// destDictionary picks the ColDestination encoding: a dictionary<int32,
// utf8> (one entry per destination of the message, an int32 per row) when
// true, plain utf8 (the name repeated on every row) when false. The
// dictionary is the wire: BenchmarkPartitionWire measured it as cheap as
// utf8 to read and slice, cheaper to encode at few destinations and
// smaller, and one IPC record per destination 10-18x dearer to encode at
// 10,000 destinations (docs/adr/0016-segments.md, "Router"). utf8 stays for
// the benchmark and the tests (the flusher reads both).
var destDictionary = true

// A partition is the parts of one batch bound for one partition: parts
// [i, j) of the split's (ranked) parts, rows [lo, hi) of its permuted batch.
type partition struct {
	n      int
	parts  []split.Part
	lo, hi int64
}

// partitions groups parts (ordered by rank, the partition) into one
// partition each; parts of retired destinations must be gone already.
func partitions(parts []split.Part) []partition {
	var out []partition
	for i := 0; i < len(parts); {
		j := i + 1
		for j < len(parts) && parts[j].Rank == parts[i].Rank {
			j++
		}
		out = append(out, partition{n: parts[i].Rank, parts: parts[i:j], lo: parts[i].Lo, hi: parts[j-1].Hi})
		i = j
	}
	return out
}

// destField is ColDestination's field in a partition message.
func destField() arrow.Field {
	if destDictionary {
		return arrow.Field{Name: proto.ColDestination, Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}}
	}
	return arrow.Field{Name: proto.ColDestination, Type: arrow.BinaryTypes.String}
}

// messageSchema is the table's schema with ColDestination appended (the
// table's metadata kept).
func messageSchema(table *arrow.Schema) *arrow.Schema {
	fields := append(table.Fields(), destField())
	md := table.Metadata()
	return arrow.NewSchema(fields, &md)
}

// destColumn returns the ColDestination column of p's rows: each part's
// destination on each of its rows.
func destColumn(mem memory.Allocator, p partition) arrow.Array {
	rows := int(p.hi - p.lo)
	if destDictionary {
		ib := array.NewInt32Builder(mem)
		defer ib.Release()
		ib.Reserve(rows)
		sb := array.NewStringBuilder(mem)
		defer sb.Release()
		for k, part := range p.parts {
			sb.Append(part.Destination)
			for range part.Hi - part.Lo {
				ib.UnsafeAppend(int32(k))
			}
		}
		idx, dict := ib.NewArray(), sb.NewArray()
		defer idx.Release()
		defer dict.Release()
		return array.NewDictionaryArray(destField().Type, idx, dict)
	}
	sb := array.NewStringBuilder(mem)
	defer sb.Release()
	size := 0
	for _, part := range p.parts {
		size += len(part.Destination) * int(part.Hi-part.Lo)
	}
	sb.Reserve(rows)
	sb.ReserveData(size)
	for _, part := range p.parts {
		for range part.Hi - part.Lo {
			sb.UnsafeAppend([]byte(part.Destination))
		}
	}
	return sb.NewArray()
}

// message returns p's rows with their ColDestination column, as one record
// of schema (messageSchema of the table's).
func message(mem memory.Allocator, res *split.Result, schema *arrow.Schema, p partition) arrow.RecordBatch {
	w := res.Window(p.lo, p.hi)
	defer w.Release()
	dest := destColumn(mem, p)
	defer dest.Release()
	cols := append(append(make([]arrow.Array, 0, w.NumCols()+1), w.Columns()...), dest)
	return array.NewRecordBatch(schema, cols, p.hi-p.lo)
}

// encodePartitions makes the messages of one batch: one per partition (more
// when a body would exceed the payload limit), in partition order, the
// partitions encoded in parallel.
func (h *Handler) encodePartitions(id string, base nats.Header, res *split.Result, parts []split.Part) ([]*nats.Msg, error) {
	ps := partitions(parts)
	if len(ps) == 0 {
		return nil, nil
	}
	schema := messageSchema(parts[0].Batch.Schema())
	per := make([][]*nats.Msg, len(ps))
	errs := make([]error, len(ps))
	enc0 := newBodyEncoder(schema)
	mem := memory.DefaultAllocator
	one := func(enc *bodyEncoder, i int) error {
		p := ps[i]
		rec := message(mem, res, schema, p)
		defer rec.Release()
		ends := make([]int64, len(p.parts)) // run ends within the message
		first, last := p.parts[0].First, p.parts[0].Last
		for k, part := range p.parts {
			ends[k] = part.Hi - p.lo
			if part.First.Less(first) {
				first = part.First
			}
			if last.Less(part.Last) {
				last = part.Last
			}
		}
		out, err := h.encode(enc, rec, ends, first, last, base, proto.RoutedPartitionSubject(p.n), proto.PartitionMsgID(id, p.n))
		if err != nil {
			err = fmt.Errorf("encoding batch %s for partition %d: %w", id, p.n, err)
		}
		per[i], errs[i] = out, err
		return err
	}
	workers := min(h.o.EncodeWorkers, len(ps))
	if workers <= 1 {
		for i := range ps {
			if err := one(enc0, i); err != nil {
				return nil, err
			}
		}
	} else {
		var next atomic.Int64
		var failed atomic.Bool
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				enc := enc0.clone()
				for !failed.Load() {
					i := int(next.Add(1) - 1)
					if i >= len(ps) {
						return
					}
					if one(enc, i) != nil {
						failed.Store(true)
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return nil, err
			}
		}
	}
	n := 0
	for _, m := range per {
		n += len(m)
	}
	msgs := make([]*nats.Msg, 0, n)
	for _, m := range per {
		msgs = append(msgs, m...)
	}
	return msgs, nil
}

func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// runsIn counts the destination runs that rows [lo, hi) of a message touch,
// ends being the runs' (ascending) ends.
func runsIn(ends []int64, lo, hi int64) int {
	a := sort.Search(len(ends), func(k int) bool { return ends[k] > lo })
	b := sort.Search(len(ends), func(k int) bool { return ends[k] >= hi })
	return b - a + 1
}

// encode makes the messages of one partition's rows b (ends: the
// destination runs' ends): one, or several when the body would exceed the
// payload limit, cut by rows (a cut keeps every destination's rows
// contiguous, a destination may span two pieces).
func (h *Handler) encode(enc *bodyEncoder, b arrow.RecordBatch, ends []int64, first, last proto.Position, base nats.Header, subject, msgID string) ([]*nats.Msg, error) {
	mk := func(b arrow.RecordBatch, lo int64, first, last proto.Position, msgID string) (*nats.Msg, bool, error) {
		body, err := enc.encode(b)
		if err != nil {
			return nil, false, err
		}
		hd := maps.Clone(base)
		hd.Set(proto.HeaderFirst, first.String())
		hd.Set(proto.HeaderLast, last.String())
		hd.Set(proto.HeaderRows, strconv.FormatInt(b.NumRows(), 10))
		hd.Set(proto.HeaderDestinations, strconv.Itoa(runsIn(ends, lo, lo+b.NumRows())))
		hd.Set(proto.HeaderMsgID, msgID)
		fits := h.o.MaxPayload <= 0 || len(body)+headerSize(hd) <= h.o.MaxPayload
		return &nats.Msg{Subject: subject, Header: hd, Data: body}, fits, nil
	}
	m, fits, err := mk(b, 0, first, last, msgID)
	if err != nil || fits {
		return []*nats.Msg{m}, err
	}
	// Too large: halve by rows until every piece fits.
	var out []*nats.Msg
	var cut func(b arrow.RecordBatch, lo int64) error
	cut = func(b arrow.RecordBatch, lo int64) error {
		n := b.NumRows()
		for _, half := range [][2]int64{{0, n / 2}, {n / 2, n}} {
			s := b.NewSlice(half[0], half[1])
			f, l := split.Span(s)
			m, fits, err := mk(s, lo+half[0], f, l, msgID+":"+strconv.Itoa(len(out)))
			switch {
			case err != nil:
			case fits:
				out = append(out, m)
			case s.NumRows() <= 1:
				err = natsx.Permanent(fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(m.Data), h.o.MaxPayload))
			default:
				err = cut(s, lo+half[0])
			}
			s.Release()
			if err != nil {
				return err
			}
		}
		return nil
	}
	if b.NumRows() <= 1 {
		return nil, natsx.Permanent(fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(m.Data), h.o.MaxPayload))
	}
	// Index pieces in order so ids are a pure function of the rows and the
	// limit.
	if err := cut(b, 0); err != nil {
		return nil, err
	}
	return out, nil
}

// dropRetired returns parts without those of retired destinations (ranked
// retiredRank by the split, so they are the last parts) and the rows
// dropped. The caller counts them once the batch is stored: a batch that
// fails is retried and would count them again.
func dropRetired(parts []split.Part) ([]split.Part, int64) {
	var rows int64
	k := len(parts)
	for k > 0 && parts[k-1].Rank == retiredRank {
		k--
		rows += parts[k].Batch.NumRows()
	}
	return parts[:k], rows
}

// rank is the split's rank of a destination: its partition, or retiredRank.
func (h *Handler) rank(destination string) int {
	if h.o.Retired != nil && h.o.Retired(destination) {
		return retiredRank
	}
	return proto.Partition(destination, h.o.Partitions)
}
