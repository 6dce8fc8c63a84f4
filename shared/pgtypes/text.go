package pgtypes

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/sluice-cdc/sluice/proto"
)

// Sentinels for the infinite values of timestamp, timestamptz and date.
// A finite value never takes them: parsing rejects a finite timestamp that
// would land on them or beyond (after 294247-01-10 04:00:54.775806,
// ErrOutOfRange).
const (
	TimestampInfinity    = math.MaxInt64 // 'infinity'
	TimestampNegInfinity = math.MinInt64 // '-infinity'
	DateInfinity         = math.MaxInt32 // 'infinity'
	DateNegInfinity      = math.MinInt32 // '-infinity'
)

// maxArrowData is the most bytes one utf8/binary array (int32 offsets) holds.
const maxArrowData = math.MaxInt32

// AppendText appends to b the value whose Postgres text output form is text
// (what pgoutput sends for a column in text mode); nil text appends NULL.
// b must be of kind's Arrow type (NewBuilder). On error nothing is appended,
// so the caller may append NULL or fail the batch; errors wrap ErrSyntax,
// ErrOutOfRange, ErrMultiDim or ErrBuilder.
//
// The text is read as the session settings of the replication connection
// produce it; the reader must set DateStyle=ISO, TimeZone=UTC,
// IntervalStyle=postgres, bytea_output=hex and extra_float_digits=3 (see the
// package doc).
func AppendText(b array.Builder, kind proto.Kind, text []byte) error {
	if b == nil {
		return fmt.Errorf("appending %s value: nil builder: %w", kind, ErrBuilder)
	}
	if elem, ok := kind.Elem(); ok {
		lb, ok := b.(*array.ListBuilder)
		if !ok || !fits(lb.ValueBuilder(), elem) {
			return fmt.Errorf("appending %s value to %T: %w", kind, b, ErrBuilder)
		}
		if text == nil {
			lb.AppendNull()
			return nil
		}
		if err := appendArray(lb, elem, text); err != nil {
			return fmt.Errorf("parsing %s value %q: %w", kind, clip(text), err)
		}
		return nil
	}
	if !fits(b, kind) {
		if _, err := kind.ArrowType(); err != nil {
			return fmt.Errorf("appending %q value: %w", kind, ErrKind)
		}
		return fmt.Errorf("appending %s value to %T: %w", kind, b, ErrBuilder)
	}
	if text == nil {
		b.AppendNull()
		return nil
	}
	var buf *[]byte
	if kind == proto.KindBytea {
		sc := scratchPool.Get().(*scratch)
		defer scratchPool.Put(sc)
		buf = &sc.buf
	}
	s, err := parseScalar(kind, text, buf)
	if err == nil {
		err = checkData(b, len(s.raw))
	}
	if err != nil {
		return fmt.Errorf("parsing %s value %q: %w", kind, clip(text), err)
	}
	put(b, kind, s)
	return nil
}

// clip shortens a value for an error message.
func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

type scratch struct {
	buf   []byte
	elems []span
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// fits reports whether b is the builder NewBuilder makes for kind (scalar).
func fits(b array.Builder, kind proto.Kind) bool {
	var ok bool
	switch kind {
	case proto.KindInt16:
		_, ok = b.(*array.Int16Builder)
	case proto.KindInt32:
		_, ok = b.(*array.Int32Builder)
	case proto.KindInt64:
		_, ok = b.(*array.Int64Builder)
	case proto.KindFloat32:
		_, ok = b.(*array.Float32Builder)
	case proto.KindFloat64:
		_, ok = b.(*array.Float64Builder)
	case proto.KindBool:
		_, ok = b.(*array.BooleanBuilder)
	case proto.KindTimestampTZ, proto.KindTimestamp:
		var tb *array.TimestampBuilder
		if tb, ok = b.(*array.TimestampBuilder); ok {
			ok = tb.Type().(*arrow.TimestampType).Unit == arrow.Microsecond
		}
	case proto.KindDate:
		_, ok = b.(*array.Date32Builder)
	case proto.KindBytea:
		_, ok = b.(*array.BinaryBuilder)
		if ok {
			ok = b.Type().ID() == arrow.BINARY
		}
	case proto.KindNumeric, proto.KindText, proto.KindUUID, proto.KindTime, proto.KindInterval,
		proto.KindJSON, proto.KindJSONB, proto.KindToJSONB, proto.KindEnum, proto.KindOther:
		_, ok = b.(*array.StringBuilder)
	}
	return ok
}

// scalar is one parsed value; which field is set depends on the kind.
type scalar struct {
	i   int64
	f   float64
	b   bool
	raw []byte // string kinds: the text; bytea: the decoded bytes
}

func checkData(b array.Builder, n int) error {
	if n == 0 {
		return nil
	}
	var have int
	switch bb := b.(type) {
	case *array.StringBuilder:
		have = bb.DataLen()
	case *array.BinaryBuilder:
		have = bb.DataLen()
	default:
		return nil
	}
	if n > maxArrowData-have {
		return fmt.Errorf("%d bytes on top of %d in one array: %w", n, have, ErrOutOfRange)
	}
	return nil
}

// parseScalar parses one scalar value. buf is scratch space for bytea.
func parseScalar(kind proto.Kind, t []byte, buf *[]byte) (scalar, error) {
	var s scalar
	var err error
	switch kind {
	case proto.KindInt16:
		s.i, err = parseInt(t, 16)
	case proto.KindInt32:
		s.i, err = parseInt(t, 32)
	case proto.KindInt64:
		s.i, err = parseInt(t, 64)
	case proto.KindFloat32:
		s.f, err = parseFloat(t, 32)
	case proto.KindFloat64:
		s.f, err = parseFloat(t, 64)
	case proto.KindBool:
		s.b, err = parseBool(t)
	case proto.KindTimestampTZ:
		s.i, err = parseTimestamp(t, true)
	case proto.KindTimestamp:
		s.i, err = parseTimestamp(t, false)
	case proto.KindDate:
		s.i, err = parseDate(t)
	case proto.KindBytea:
		*buf, err = decodeBytea((*buf)[:0], t)
		s.raw = *buf
	case proto.KindNumeric:
		if !validNumeric(t) {
			err = ErrSyntax
		}
		s.raw = t
	case proto.KindToJSONB:
		// Already converted (Shape.AppendJSON): a pack never carries
		// anything but a JSON document in this kind.
		if !json.Valid(t) {
			err = ErrSyntax
		}
		s.raw = t
	case proto.KindText, proto.KindUUID, proto.KindTime, proto.KindInterval,
		proto.KindJSON, proto.KindJSONB, proto.KindEnum, proto.KindOther:
		s.raw = t
	default:
		err = ErrKind
	}
	return s, err
}

// put appends a parsed scalar; b has been checked with fits.
func put(b array.Builder, kind proto.Kind, s scalar) {
	switch kind {
	case proto.KindInt16:
		b.(*array.Int16Builder).Append(int16(s.i))
	case proto.KindInt32:
		b.(*array.Int32Builder).Append(int32(s.i))
	case proto.KindInt64:
		b.(*array.Int64Builder).Append(s.i)
	case proto.KindFloat32:
		b.(*array.Float32Builder).Append(float32(s.f))
	case proto.KindFloat64:
		b.(*array.Float64Builder).Append(s.f)
	case proto.KindBool:
		b.(*array.BooleanBuilder).Append(s.b)
	case proto.KindTimestampTZ, proto.KindTimestamp:
		b.(*array.TimestampBuilder).Append(arrow.Timestamp(s.i))
	case proto.KindDate:
		b.(*array.Date32Builder).Append(arrow.Date32(s.i))
	case proto.KindBytea:
		b.(*array.BinaryBuilder).Append(s.raw)
	default:
		b.(*array.StringBuilder).BinaryBuilder.Append(s.raw)
	}
}

func parseInt(t []byte, bits uint) (int64, error) {
	i, neg := 0, false
	if len(t) > 0 && (t[0] == '-' || t[0] == '+') {
		neg, i = t[0] == '-', 1
	}
	if i == len(t) || len(t) > 24 {
		return 0, ErrSyntax
	}
	var u uint64
	for ; i < len(t); i++ {
		c := t[i] - '0'
		if c > 9 {
			return 0, ErrSyntax
		}
		if u > (1<<63)/10 {
			return 0, ErrOutOfRange
		}
		u = u*10 + uint64(c)
		if u > 1<<63 {
			return 0, ErrOutOfRange
		}
	}
	limit := uint64(1) << (bits - 1)
	if neg {
		if u > limit {
			return 0, ErrOutOfRange
		}
		return int64(-u), nil
	}
	if u >= limit {
		return 0, ErrOutOfRange
	}
	return int64(u), nil
}

func parseFloat(t []byte, bits int) (float64, error) {
	if len(t) == 0 || len(t) > 64 {
		return 0, ErrSyntax
	}
	// Postgres writes NaN, Infinity, -Infinity; strconv reads all three.
	f, err := strconv.ParseFloat(unsafe.String(&t[0], len(t)), bits)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return 0, ErrOutOfRange
		}
		return 0, ErrSyntax
	}
	return f, nil
}

func parseBool(t []byte) (bool, error) {
	switch string(t) {
	case "t", "true":
		return true, nil
	case "f", "false":
		return false, nil
	}
	return false, ErrSyntax
}

// validNumeric accepts numeric_out's form, which is also a JSON number
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?), and NaN, Infinity, -Infinity.
func validNumeric(t []byte) bool {
	switch string(t) {
	case "NaN", "Infinity", "-Infinity":
		return true
	}
	return isJSONNumber(t, false)
}

// isJSONNumber checks the JSON number grammar; exp allows an exponent.
func isJSONNumber[T string | []byte](t T, exp bool) bool {
	i := 0
	if i < len(t) && t[i] == '-' {
		i++
	}
	if i == len(t) {
		return false
	}
	if t[i] == '0' {
		i++
	} else {
		start := i
		for i < len(t) && t[i] >= '0' && t[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	if i < len(t) && t[i] == '.' {
		i++
		start := i
		for i < len(t) && t[i] >= '0' && t[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	if exp && i < len(t) && (t[i] == 'e' || t[i] == 'E') {
		i++
		if i < len(t) && (t[i] == '+' || t[i] == '-') {
			i++
		}
		start := i
		for i < len(t) && t[i] >= '0' && t[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	return i == len(t)
}

// decodeBytea decodes bytea_output=hex ("\x0102ab"), and, for a session
// left on bytea_output=escape, the escape form (\\ and \ooo octal).
func decodeBytea(dst, t []byte) ([]byte, error) {
	if len(t) >= 2 && t[0] == '\\' && t[1] == 'x' {
		h := t[2:]
		if len(h)%2 != 0 {
			return dst, ErrSyntax
		}
		for i := 0; i < len(h); i += 2 {
			hi, ok1 := unhex(h[i])
			lo, ok2 := unhex(h[i+1])
			if !ok1 || !ok2 {
				return dst, ErrSyntax
			}
			dst = append(dst, hi<<4|lo)
		}
		return dst, nil
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		if i+1 < len(t) && t[i+1] == '\\' {
			dst = append(dst, '\\')
			i++
			continue
		}
		if i+3 < len(t) && isOct(t[i+1]) && isOct(t[i+2]) && isOct(t[i+3]) && t[i+1] <= '3' {
			dst = append(dst, (t[i+1]-'0')<<6|(t[i+2]-'0')<<3|(t[i+3]-'0'))
			i += 3
			continue
		}
		return dst, ErrSyntax
	}
	return dst, nil
}

func isOct(c byte) bool { return c >= '0' && c <= '7' }

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
