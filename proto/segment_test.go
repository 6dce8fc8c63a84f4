package proto

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func destBatch(t *testing.T, dict bool, names ...string) arrow.RecordBatch {
	t.Helper()
	mem := memory.NewGoAllocator()
	var col arrow.Array
	var typ arrow.DataType = arrow.BinaryTypes.String
	if dict {
		dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
		typ = dt
		b := array.NewDictionaryBuilder(mem, dt).(*array.BinaryDictionaryBuilder)
		for _, n := range names {
			if err := b.AppendString(n); err != nil {
				t.Fatal(err)
			}
		}
		col = b.NewArray()
	} else {
		b := array.NewStringBuilder(mem)
		b.AppendValues(names, nil)
		col = b.NewArray()
	}
	s := arrow.NewSchema([]arrow.Field{{Name: ColDestination, Type: typ}}, nil)
	return array.NewRecordBatch(s, []arrow.Array{col}, int64(len(names)))
}

func TestDestinationRuns(t *testing.T) {
	for _, dict := range []bool{false, true} {
		rec := destBatch(t, dict, "a", "a", "b", "c", "c", "c")
		runs, col, err := DestinationRuns(rec)
		if err != nil || col != 0 {
			t.Fatalf("dict=%v: %v col %d", dict, err, col)
		}
		want := []DestinationRun{{"a", 0, 2}, {"b", 2, 3}, {"c", 3, 6}}
		if len(runs) != len(want) {
			t.Fatalf("dict=%v: runs %v", dict, runs)
		}
		for i := range want {
			if runs[i] != want[i] {
				t.Fatalf("dict=%v: runs %v, want %v", dict, runs, want)
			}
		}
		if _, _, err := DestinationRuns(destBatch(t, dict, "a", "b", "a")); err == nil || !strings.Contains(err.Error(), "not contiguous") {
			t.Fatalf("dict=%v: split destination accepted: %v", dict, err)
		}
		// Out of name order (the names seen are then kept): a repeat after
		// the order broke, and one after it resumed, are both found.
		for _, names := range [][]string{{"b", "a", "c", "a"}, {"b", "a", "c", "b"}, {"c", "b", "a", "d", "e", "c"}} {
			if _, _, err := DestinationRuns(destBatch(t, dict, names...)); err == nil || !strings.Contains(err.Error(), "not contiguous") {
				t.Fatalf("dict=%v: %v: split destination accepted: %v", dict, names, err)
			}
		}
		if runs, _, err := DestinationRuns(destBatch(t, dict, "b", "a", "c")); err != nil || len(runs) != 3 {
			t.Fatalf("dict=%v: out-of-order distinct runs refused: %v %v", dict, runs, err)
		}
		if _, _, err := DestinationRuns(destBatch(t, dict, "a.b")); err == nil {
			t.Fatalf("dict=%v: invalid destination accepted", dict)
		}
	}
}

func TestSegmentPath(t *testing.T) {
	at := time.Date(2026, 12, 2, 1, 2, 3, 4, time.UTC)
	id := SegmentID(at, "w1", 7)
	got, err := SegmentTime(id)
	if err != nil || !got.Equal(at) {
		t.Fatalf("SegmentTime(%q) = %v, %v", id, got, err)
	}
	p, err := SegmentPath(id, "public.t")
	if err != nil || p != ".seg/2026-12-02/01/public.t/"+id+".arrow" {
		t.Fatalf("SegmentPath = %q, %v", p, err)
	}
	if SegmentID(at, "w1", 1) >= SegmentID(at.Add(time.Nanosecond), "w1", 0) {
		t.Fatal("segment ids do not sort by time")
	}
}
