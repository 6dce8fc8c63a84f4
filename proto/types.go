package proto

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// Kind is the contract's name for how a Postgres type travels. The reader
// assigns one to every source column from its type; the field's MetaKind
// metadata carries it, and every later stage reads values by kind, never by
// guessing from the Arrow type.
type Kind string

// The kinds of the contract. Everything the contract does not name travels as
// KindOther: its Postgres text form.
const (
	KindInt16       Kind = "int16"       // smallint
	KindInt32       Kind = "int32"       // integer
	KindInt64       Kind = "int64"       // bigint
	KindNumeric     Kind = "numeric"     // numeric, any precision: exact text form ("NaN", "Infinity" included)
	KindFloat32     Kind = "float32"     // real
	KindFloat64     Kind = "float64"     // double precision
	KindBool        Kind = "bool"        // boolean
	KindText        Kind = "text"        // text, varchar, char (padded as Postgres pads it)
	KindUUID        Kind = "uuid"        // canonical lowercase text form
	KindTimestampTZ Kind = "timestamptz" // microseconds since the Unix epoch, UTC
	KindTimestamp   Kind = "timestamp"   // microseconds since the Unix epoch of the wall time
	KindDate        Kind = "date"        // days since the Unix epoch
	KindTime        Kind = "time"        // Postgres text form, e.g. 12:34:56.789
	KindInterval    Kind = "interval"    // Postgres text form (IntervalStyle postgres)
	KindJSON        Kind = "json"        // the document's text, as stored
	KindJSONB       Kind = "jsonb"       // the document's text, as Postgres renders it
	KindBytea       Kind = "bytea"       // raw bytes
	KindEnum        Kind = "enum"        // the label
	KindToJSONB     Kind = "to_jsonb"    // composite, hstore, multi-dimensional and other arrays: the JSON to_jsonb gives
	KindOther       Kind = "other"       // any other type: its Postgres text form
)

// ArrayKind is the kind of a one-dimensional array of elem.
func ArrayKind(elem Kind) Kind { return "array:" + elem }

// Elem returns the element kind of an array kind; ok is false for a scalar.
func (k Kind) Elem() (Kind, bool) {
	e, ok := strings.CutPrefix(string(k), "array:")
	return Kind(e), ok
}

// ArrowType is the Arrow type a kind travels as.
func (k Kind) ArrowType() (arrow.DataType, error) {
	if e, ok := k.Elem(); ok {
		et, err := e.ArrowType()
		if err != nil {
			return nil, err
		}
		return arrow.ListOf(et), nil
	}
	switch k {
	case KindInt16:
		return arrow.PrimitiveTypes.Int16, nil
	case KindInt32:
		return arrow.PrimitiveTypes.Int32, nil
	case KindInt64:
		return arrow.PrimitiveTypes.Int64, nil
	case KindFloat32:
		return arrow.PrimitiveTypes.Float32, nil
	case KindFloat64:
		return arrow.PrimitiveTypes.Float64, nil
	case KindBool:
		return arrow.FixedWidthTypes.Boolean, nil
	case KindTimestampTZ:
		return &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, nil
	case KindTimestamp:
		return &arrow.TimestampType{Unit: arrow.Microsecond}, nil
	case KindDate:
		return arrow.FixedWidthTypes.Date32, nil
	case KindBytea:
		return arrow.BinaryTypes.Binary, nil
	case KindNumeric, KindText, KindUUID, KindTime, KindInterval, KindJSON, KindJSONB, KindToJSONB, KindEnum, KindOther:
		return arrow.BinaryTypes.String, nil
	}
	return nil, fmt.Errorf("unknown kind %q", k)
}

// FieldKind reads the kind a field declares in its metadata.
func FieldKind(f arrow.Field) (Kind, error) {
	v, ok := f.Metadata.GetValue(MetaKind)
	if !ok {
		return "", fmt.Errorf("field %q carries no %s metadata", f.Name, MetaKind)
	}
	k := Kind(v)
	if _, err := k.ArrowType(); err != nil {
		return "", fmt.Errorf("field %q: %w", f.Name, err)
	}
	return k, nil
}

var tableRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}\.[a-z_][a-z0-9_]{0,62}$`)

// ValidateTable checks a configured source table name: schema.table, each
// part a lowercase unquoted Postgres identifier. The name becomes a subject
// suffix, a directory and part of a ClickHouse table name, so nothing else is
// accepted.
func ValidateTable(name string) error {
	if !tableRe.MatchString(name) {
		return fmt.Errorf("table %q: want schema.table, lowercase letters, digits and _ (unquoted Postgres identifiers)", name)
	}
	return nil
}
