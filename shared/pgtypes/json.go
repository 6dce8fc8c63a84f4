package pgtypes

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/sluice-cdc/sluice/proto"
)

// AppendJSON appends to dst the JSON for a normalized value (Value's, or the
// catalog's) of kind, equal as a JSON value to Postgres' to_jsonb of the
// source value in a session with TimeZone UTC: integers, floats and numeric
// as JSON numbers (NaN, Infinity, -Infinity as strings); timestamptz as
// "2026-01-01T00:00:00.5+00:00", timestamp without the offset, date as
// "2026-01-01" (" BC" appended before year 1; infinities as "infinity" and
// "-infinity"); json, jsonb and to_jsonb (already converted) embedded; bytea as "\\x0102ab"; arrays as
// JSON arrays; every other kind as a JSON string of its text form.
//
// Accepted Go types: any integer type, float64 and float32, arrow.Timestamp
// and arrow.Date32, time.Time for timestamps and dates, string and []byte
// interchangeably for text-like kinds and bytea, []any or any slice for
// arrays. Errors wrap ErrValue (or ErrKind) and dst is returned unchanged.
func AppendJSON(dst []byte, kind proto.Kind, v any) ([]byte, error) {
	out, err := appendJSON(dst, kind, v)
	if err != nil {
		return dst, fmt.Errorf("rendering %s value as JSON: %w", kind, err)
	}
	return out, nil
}

func appendJSON(dst []byte, kind proto.Kind, v any) ([]byte, error) {
	if v == nil {
		return append(dst, "null"...), nil
	}
	if elem, ok := kind.Elem(); ok {
		return appendJSONArray(dst, elem, v)
	}
	switch kind {
	case proto.KindInt16, proto.KindInt32, proto.KindInt64:
		i, ok := toInt(v)
		if !ok {
			return dst, badValue(v)
		}
		return strconv.AppendInt(dst, i, 10), nil
	case proto.KindFloat32, proto.KindFloat64:
		f, ok := toFloat(v)
		if !ok {
			return dst, badValue(v)
		}
		if kind == proto.KindFloat32 {
			return appendFloat(dst, float64(float32(f)), 32), nil
		}
		return appendFloat(dst, f, 64), nil
	case proto.KindNumeric:
		return appendNumeric(dst, v)
	case proto.KindBool:
		b, ok := toBool(v)
		if !ok {
			return dst, badValue(v)
		}
		return strconv.AppendBool(dst, b), nil
	case proto.KindTimestampTZ, proto.KindTimestamp:
		us, ok := toMicros(v)
		if !ok {
			return dst, badValue(v)
		}
		return appendTimestampJSON(dst, us, kind == proto.KindTimestampTZ), nil
	case proto.KindDate:
		d, ok := toDays(v)
		if !ok {
			return dst, badValue(v)
		}
		return appendDateJSON(dst, d), nil
	case proto.KindBytea:
		switch b := v.(type) {
		case []byte:
			return appendByteaJSON(dst, b), nil
		case string:
			return appendByteaJSON(dst, b), nil
		}
		return dst, badValue(v)
	case proto.KindJSON, proto.KindJSONB, proto.KindToJSONB:
		switch s := v.(type) {
		case string:
			return appendEmbedded(dst, []byte(s))
		case []byte:
			return appendEmbedded(dst, s)
		case json.RawMessage:
			return appendEmbedded(dst, s)
		}
		return dst, badValue(v)
	case proto.KindText, proto.KindUUID, proto.KindTime, proto.KindInterval, proto.KindEnum, proto.KindOther:
		switch s := v.(type) {
		case string:
			return appendString(dst, s), nil
		case []byte:
			return appendString(dst, s), nil
		}
		return dst, badValue(v)
	}
	return dst, ErrKind
}

func badValue(v any) error { return fmt.Errorf("%T: %w", v, ErrValue) }

func appendJSONArray(dst []byte, elem proto.Kind, v any) ([]byte, error) {
	start := len(dst)
	dst = append(dst, '[')
	if s, ok := v.([]any); ok {
		for i, e := range s {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendJSON(dst, elem, e); err != nil {
				return dst[:start], fmt.Errorf("element %d: %w", i, err)
			}
		}
		return append(dst, ']'), nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return dst[:start], badValue(v)
	}
	for i := range rv.Len() {
		if i > 0 {
			dst = append(dst, ',')
		}
		e := rv.Index(i)
		var ev any
		if (e.Kind() == reflect.Pointer || e.Kind() == reflect.Interface) && e.IsNil() {
			ev = nil
		} else {
			if e.Kind() == reflect.Pointer {
				e = e.Elem()
			}
			ev = e.Interface()
		}
		var err error
		if dst, err = appendJSON(dst, elem, ev); err != nil {
			return dst[:start], fmt.Errorf("element %d: %w", i, err)
		}
	}
	return append(dst, ']'), nil
}

func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case int:
		return int64(x), true
	case uint64:
		return int64(x), x <= math.MaxInt64
	case uint32:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint:
		return int64(x), uint64(x) <= math.MaxInt64
	case float64:
		if x != math.Trunc(x) || x < -(1<<63) || x >= 1<<63 {
			return 0, false
		}
		return int64(x), true
	case string:
		i, err := strconv.ParseInt(x, 10, 64)
		return i, err == nil
	case json.Number:
		i, err := x.Int64()
		return i, err == nil
	}
	return 0, false
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		return f, err == nil
	}
	if i, ok := toInt(v); ok {
		return float64(i), true
	}
	return 0, false
}

func toBool(v any) (bool, bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case string:
		b, err := parseBool([]byte(x))
		return b, err == nil
	}
	if i, ok := toInt(v); ok && (i == 0 || i == 1) {
		return i == 1, true
	}
	return false, false
}

func toMicros(v any) (int64, bool) {
	switch x := v.(type) {
	case arrow.Timestamp:
		return int64(x), true
	case time.Time:
		return x.UnixMicro(), true
	}
	return toInt(v)
}

func toDays(v any) (int64, bool) {
	switch x := v.(type) {
	case arrow.Date32:
		return int64(x), true
	case time.Time:
		y, m, d := x.Date()
		return daysFromCivil(int64(y), int(m), d), true
	}
	d, ok := toInt(v)
	return d, ok && d >= math.MinInt32 && d <= math.MaxInt32
}

func appendNumeric(dst []byte, v any) ([]byte, error) {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case []byte:
		s = string(x)
	case json.Number:
		s = string(x)
	case float64, float32:
		f, _ := toFloat(v)
		return appendFloat(dst, f, 64), nil
	default:
		i, ok := toInt(v)
		if !ok {
			return dst, badValue(v)
		}
		return strconv.AppendInt(dst, i, 10), nil
	}
	switch s {
	case "NaN", "nan":
		return append(dst, `"NaN"`...), nil
	case "Infinity", "inf", "+inf", "infinity":
		return append(dst, `"Infinity"`...), nil
	case "-Infinity", "-inf", "-infinity":
		return append(dst, `"-Infinity"`...), nil
	}
	if !isJSONNumber(s, true) {
		return dst, fmt.Errorf("%q is not a number: %w", clip([]byte(s)), ErrValue)
	}
	return append(dst, s...), nil
}

func appendEmbedded(dst, doc []byte) ([]byte, error) {
	if !json.Valid(doc) {
		return dst, fmt.Errorf("document %q is not JSON: %w", clip(doc), ErrValue)
	}
	return append(dst, doc...), nil
}

const hexDigits = "0123456789abcdef"

func appendByteaJSON[T string | []byte](dst []byte, b T) []byte {
	dst = append(dst, `"\\x`...)
	for i := 0; i < len(b); i++ {
		dst = append(dst, hexDigits[b[i]>>4], hexDigits[b[i]&15])
	}
	return append(dst, '"')
}

// appendString writes a JSON string as Postgres escapes it; invalid UTF-8
// becomes U+FFFD.
func appendString[T string | []byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"':
				dst = append(dst, '\\', '"')
			case '\\':
				dst = append(dst, '\\', '\\')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
			}
			i++
			start = i
			continue
		}
		var r rune
		var size int
		switch x := any(s).(type) {
		case string:
			r, size = utf8.DecodeRuneInString(x[i:])
		case []byte:
			r, size = utf8.DecodeRune(x[i:])
		}
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendTimestampJSON writes microseconds since the epoch the way to_jsonb
// writes timestamp/timestamptz (ISO 8601, 'T', trimmed fraction, "+00:00"
// for timestamptz with TimeZone UTC, " BC" before year 1).
func appendTimestampJSON(dst []byte, us int64, tz bool) []byte {
	switch us {
	case TimestampInfinity:
		return append(dst, `"infinity"`...)
	case TimestampNegInfinity:
		return append(dst, `"-infinity"`...)
	}
	days, inDay := unfoldedMicros(us)
	y, m, d := civilFromDays(days)
	dst = append(dst, '"')
	dst = appendYMD(dst, y, m, d)
	secs, frac := inDay/1_000_000, inDay%1_000_000
	dst = append(dst, 'T')
	dst = append2(dst, int(secs/3600))
	dst = append(dst, ':')
	dst = append2(dst, int(secs/60%60))
	dst = append(dst, ':')
	dst = append2(dst, int(secs%60))
	if frac != 0 {
		dst = append(dst, '.')
		var buf [6]byte
		for i := 5; i >= 0; i-- {
			buf[i] = byte('0' + frac%10)
			frac /= 10
		}
		n := 6
		for buf[n-1] == '0' {
			n--
		}
		dst = append(dst, buf[:n]...)
	}
	if tz {
		dst = append(dst, "+00:00"...)
	}
	if y <= 0 {
		dst = append(dst, " BC"...)
	}
	return append(dst, '"')
}

func appendDateJSON(dst []byte, days int64) []byte {
	switch days {
	case DateInfinity:
		return append(dst, `"infinity"`...)
	case DateNegInfinity:
		return append(dst, `"-infinity"`...)
	}
	y, m, d := civilFromDays(days)
	dst = append(dst, '"')
	dst = appendYMD(dst, y, m, d)
	if y <= 0 {
		dst = append(dst, " BC"...)
	}
	return append(dst, '"')
}

// appendYMD writes the year as Postgres does (at least 4 digits, BC years
// counted from 1) and the month and day.
func appendYMD(dst []byte, y int64, m, d int) []byte {
	if y <= 0 {
		y = 1 - y
	}
	var buf [20]byte
	b := strconv.AppendInt(buf[:0], y, 10)
	for i := len(b); i < 4; i++ {
		dst = append(dst, '0')
	}
	dst = append(dst, b...)
	dst = append(dst, '-')
	dst = append2(dst, m)
	dst = append(dst, '-')
	return append2(dst, d)
}

func append2(dst []byte, v int) []byte {
	return append(dst, byte('0'+v/10), byte('0'+v%10))
}
