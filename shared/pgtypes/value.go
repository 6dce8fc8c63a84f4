package pgtypes

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/sluice-cdc/sluice/proto"
)

// Value is the normalized Go value of arr[i] read as kind: nil for NULL;
// int64 for int16/int32/int64, timestamps (microseconds since the epoch)
// and dates (days); float64 for float32 (widened exactly) and float64;
// bool; string for numeric, text, uuid, time, interval, json, jsonb,
// to_jsonb, enum and other; []byte for bytea; []any of normalized elements for arrays.
// Strings and bytes are copies: they outlive arr. It returns nil when arr
// does not match kind or i is out of range; ValueOf says why.
func Value(arr arrow.Array, i int, kind proto.Kind) any {
	v, err := ValueOf(arr, i, kind)
	if err != nil {
		return nil
	}
	return v
}

// ValueOf is Value with an error for a mismatched array or index.
func ValueOf(arr arrow.Array, i int, kind proto.Kind) (any, error) {
	if arr == nil || i < 0 || i >= arr.Len() {
		return nil, fmt.Errorf("reading %s value %d: index out of range: %w", kind, i, ErrBuilder)
	}
	if arr.IsNull(i) {
		return nil, nil
	}
	bad := func() (any, error) {
		return nil, fmt.Errorf("reading %s value from %s: %w", kind, arr.DataType(), ErrBuilder)
	}
	if elem, ok := kind.Elem(); ok {
		a, ok := arr.(*array.List)
		if !ok {
			return bad()
		}
		start, end := a.ValueOffsets(i)
		vals := a.ListValues()
		out := make([]any, 0, end-start)
		for j := int(start); j < int(end); j++ {
			v, err := ValueOf(vals, j, elem)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	switch kind {
	case proto.KindInt16:
		if a, ok := arr.(*array.Int16); ok {
			return int64(a.Value(i)), nil
		}
	case proto.KindInt32:
		if a, ok := arr.(*array.Int32); ok {
			return int64(a.Value(i)), nil
		}
	case proto.KindInt64:
		if a, ok := arr.(*array.Int64); ok {
			return a.Value(i), nil
		}
	case proto.KindFloat32:
		if a, ok := arr.(*array.Float32); ok {
			return float64(a.Value(i)), nil
		}
	case proto.KindFloat64:
		if a, ok := arr.(*array.Float64); ok {
			return a.Value(i), nil
		}
	case proto.KindBool:
		if a, ok := arr.(*array.Boolean); ok {
			return a.Value(i), nil
		}
	case proto.KindTimestampTZ, proto.KindTimestamp:
		if a, ok := arr.(*array.Timestamp); ok {
			return int64(a.Value(i)), nil
		}
	case proto.KindDate:
		if a, ok := arr.(*array.Date32); ok {
			return int64(a.Value(i)), nil
		}
	case proto.KindBytea:
		if a, ok := arr.(*array.Binary); ok {
			return append([]byte{}, a.Value(i)...), nil
		}
	case proto.KindNumeric, proto.KindText, proto.KindUUID, proto.KindTime, proto.KindInterval,
		proto.KindJSON, proto.KindJSONB, proto.KindToJSONB, proto.KindEnum, proto.KindOther:
		if a, ok := arr.(*array.String); ok {
			return strings.Clone(a.Value(i)), nil
		}
	default:
		return nil, fmt.Errorf("reading %q value: %w", kind, ErrKind)
	}
	return bad()
}

// ArrowValueJSON renders arr[i] read as kind as JSON equal to Postgres'
// to_jsonb of the source value (AppendJSON of Value).
func ArrowValueJSON(arr arrow.Array, i int, kind proto.Kind) ([]byte, error) {
	v, err := ValueOf(arr, i, kind)
	if err != nil {
		return nil, err
	}
	return AppendJSON(nil, kind, v)
}
