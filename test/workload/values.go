package workload

import (
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// gen produces one value in Postgres text form; nil is NULL.
type gen func(r *rand.Rand, edge bool) *string

func s(v string) *string { return &v }

// wideColumn is one wl_wide column and how to fill it.
type wideColumn struct {
	name, typ string
	gen       gen
}

var wideColumns = []wideColumn{
	{"c_int2", "smallint", intGen(math.MinInt16, math.MaxInt16)},
	{"c_int4", "integer", intGen(math.MinInt32, math.MaxInt32)},
	{"c_int8", "bigint", intGen(math.MinInt64, math.MaxInt64)},
	{"c_num", "numeric", numericGen},
	{"c_num_fixed", "numeric(40,20)", fixedNumericGen},
	{"c_float4", "real", floatGen(32)},
	{"c_float8", "double precision", floatGen(64)},
	{"c_bool", "boolean", boolGen},
	{"c_text", "text", textGen(200)},
	{"c_varchar", "varchar(40)", textGen(40)},
	{"c_char", "char(8)", charGen},
	{"c_uuid", "uuid", uuidGen},
	{"c_tstz", "timestamptz", timestampGen(true)},
	{"c_ts", "timestamp", timestampGen(false)},
	{"c_date", "date", dateGen},
	{"c_time", "time", timeGen},
	{"c_interval", "interval", intervalGen},
	{"c_json", "json", jsonGen(false)},
	{"c_jsonb", "jsonb", jsonGen(true)},
	{"c_bytea", "bytea", byteaGen},
	{"c_enum", "public.wl_mood", enumGen},
	{"c_inet", "inet", inetGen},
	{"c_int2_arr", "smallint[]", arrayGen(intGen(math.MinInt16, math.MaxInt16), false)},
	{"c_int4_arr", "integer[]", arrayGen(intGen(math.MinInt32, math.MaxInt32), false)},
	{"c_int8_arr", "bigint[]", arrayGen(intGen(math.MinInt64, math.MaxInt64), false)},
	{"c_num_arr", "numeric[]", arrayGen(numericGen, false)},
	{"c_float4_arr", "real[]", arrayGen(floatGen(32), false)},
	{"c_float8_arr", "double precision[]", arrayGen(floatGen(64), false)},
	{"c_bool_arr", "boolean[]", arrayGen(boolGen, false)},
	{"c_text_arr", "text[]", arrayGen(textGen(30), true)},
	{"c_uuid_arr", "uuid[]", arrayGen(uuidGen, false)},
	{"c_tstz_arr", "timestamptz[]", arrayGen(timestampGen(true), true)},
	{"c_ts_arr", "timestamp[]", arrayGen(timestampGen(false), true)},
	{"c_date_arr", "date[]", arrayGen(dateGen, true)},
	{"c_time_arr", "time[]", arrayGen(timeGen, false)},
	{"c_intvl_arr", "interval[]", arrayGen(intervalGen, true)},
	{"c_json_arr", "json[]", arrayGen(jsonGen(false), true)},
	{"c_jsonb_arr", "jsonb[]", arrayGen(jsonGen(true), true)},
	{"c_bytea_arr", "bytea[]", arrayGen(byteaGen, true)},
	{"c_enum_arr", "public.wl_mood[]", arrayGen(enumGen, true)},
	// Read back as the JSON to_jsonb gives (proto.KindToJSONB).
	{"c_pair", "public.wl_pair", pairGen},
	{"c_pair_arr", "public.wl_pair[]", arrayGen(pairGen, true)},
	{"c_int4_2d", "integer[][]", int2DGen},
	{"c_box_arr", "box[]", boxArrGen},
}

// pairGen makes a public.wl_pair record literal: every field quoted (""
// and \\ escapes) or empty for NULL, the int[] field an array literal.
func pairGen(r *rand.Rand, edge bool) *string {
	fields := []*string{
		intGen(math.MinInt32, math.MaxInt32)(r, edge), textGen(20)(r, edge),
		arrayGen(intGen(-9, 9), false)(r, edge), floatGen(64)(r, edge), timestampGen(true)(r, edge),
	}
	parts := make([]string, len(fields))
	for i, f := range fields {
		if f == nil || r.IntN(8) == 0 {
			continue // NULL
		}
		parts[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `""`).Replace(*f) + `"`
	}
	return s("(" + strings.Join(parts, ",") + ")")
}

// int2DGen makes a two-dimensional integer array literal (or {}), NULL
// elements included, now and then with explicit bounds.
func int2DGen(r *rand.Rand, edge bool) *string {
	if edge && r.IntN(2) == 0 {
		return s("{}")
	}
	rows, cols := r.IntN(3)+1, r.IntN(3)+1
	var b strings.Builder
	if r.IntN(4) == 0 {
		fmt.Fprintf(&b, "[0:%d][-1:%d]=", rows-1, cols-2)
	}
	b.WriteByte('{')
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('{')
		for j := range cols {
			if j > 0 {
				b.WriteByte(',')
			}
			if r.IntN(6) == 0 {
				b.WriteString("NULL")
			} else {
				b.WriteString(*intGen(math.MinInt32, math.MaxInt32)(r, edge))
			}
		}
		b.WriteByte('}')
	}
	b.WriteByte('}')
	return s(b.String())
}

// boxArrGen makes a box[] literal: box elements are separated by ';'.
func boxArrGen(r *rand.Rand, edge bool) *string {
	if edge && r.IntN(2) == 0 {
		return s("{}")
	}
	parts := make([]string, r.IntN(3)+1)
	for i := range parts {
		if r.IntN(6) == 0 {
			parts[i] = "NULL"
			continue
		}
		parts[i] = fmt.Sprintf("(%d,%d),(%g,%g)", r.IntN(100), r.IntN(100), r.Float64()*-10, r.Float64())
	}
	return s("{" + strings.Join(parts, ";") + "}")
}

func intGen(lo, hi int64) gen {
	return func(r *rand.Rand, edge bool) *string {
		if edge {
			return s(strconv.FormatInt([]int64{lo, hi, 0, -1}[r.IntN(4)], 10))
		}
		span := min(uint64(hi-lo), 1<<40)
		v := int64(r.Uint64N(span)) + max(lo, -(1<<39))
		if v > hi {
			v = hi
		}
		return s(strconv.FormatInt(v, 10))
	}
}

func digits(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteByte(byte('0' + r.IntN(10)))
	}
	return b.String()
}

func sign(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return "-"
	}
	return ""
}

func numericGen(r *rand.Rand, edge bool) *string {
	if edge {
		switch r.IntN(7) {
		case 0:
			return s("NaN")
		case 1:
			return s("Infinity")
		case 2:
			return s("-Infinity")
		case 3: // beyond Decimal128's 38 digits, both sides of the point
			return s(sign(r) + "1" + digits(r, 60) + "." + digits(r, 40) + "1")
		case 4:
			return s("0.000000000000000000000000000000000000000001")
		case 5:
			return s("1.50") // trailing zero: to_jsonb keeps the scale
		default:
			return s("-0")
		}
	}
	return s(sign(r) + strconv.Itoa(r.IntN(100000)) + "." + digits(r, r.IntN(8)+1))
}

func fixedNumericGen(r *rand.Rand, edge bool) *string {
	if edge {
		return s(sign(r) + "9" + digits(r, 19) + "." + digits(r, 20))
	}
	return s(sign(r) + strconv.Itoa(r.IntN(1000000)) + "." + digits(r, r.IntN(20)+1))
}

func floatGen(bits int) gen {
	return func(r *rand.Rand, edge bool) *string {
		if edge {
			switch r.IntN(7) {
			case 5:
				// Its shortest decimal is a rounding bound, which Postgres
				// never prints: 1.8014398509529112e+16, 3.3554448e+07.
				if bits == 32 {
					return s("33554448")
				}
				return s("18014398509529112")
			case 0:
				return s("NaN")
			case 1:
				return s("Infinity")
			case 2:
				return s("-Infinity")
			case 3:
				if bits == 32 {
					return s(strconv.FormatFloat(math.MaxFloat32, 'g', -1, 32))
				}
				return s(strconv.FormatFloat(math.MaxFloat64, 'g', -1, 64))
			case 4:
				if bits == 32 {
					return s(strconv.FormatFloat(math.SmallestNonzeroFloat32, 'g', -1, 32))
				}
				return s("5e-324")
			default:
				return s("0")
			}
		}
		v := (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(12)-4))
		if bits == 32 {
			return s(strconv.FormatFloat(float64(float32(v)), 'g', -1, 32))
		}
		return s(strconv.FormatFloat(v, 'g', -1, 64))
	}
}

func boolGen(r *rand.Rand, _ bool) *string {
	if r.IntN(2) == 0 {
		return s("false")
	}
	return s("true")
}

// textPieces mixes ASCII with what breaks naive encoders: quotes,
// backslashes, braces and commas (array literals), newlines and tabs,
// multi-byte UTF-8 and an emoji.
var textPieces = []string{"a", "b", "Z", "0", " ", "'", `"`, `\`, "{", "}", ",", "\n", "\t", "é", "ß", "中", "🦆", "NULL", "null", "%", "_"}

func textGen(maxLen int) gen {
	return func(r *rand.Rand, edge bool) *string {
		if edge {
			switch r.IntN(3) {
			case 0:
				return s("")
			case 1:
				return s(`NULL`)
			default:
				return s(`\x00 is not a NUL, "quoted", back\slash`)
			}
		}
		var b strings.Builder
		n := r.IntN(maxLen) + 1
		for i := 0; i < n; i++ {
			if r.IntN(4) == 0 {
				b.WriteString(textPieces[r.IntN(len(textPieces))])
			} else {
				b.WriteByte(byte('a' + r.IntN(26)))
			}
		}
		out := []rune(b.String())
		if len(out) > maxLen {
			out = out[:maxLen]
		}
		return s(string(out))
	}
}

func charGen(r *rand.Rand, edge bool) *string {
	if edge {
		return s("")
	}
	n := r.IntN(8) + 1
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	if n < 8 && r.IntN(2) == 0 {
		b[n-1] = ' ' // char(n) pads; a trailing blank is not significant
	}
	return s(string(b))
}

func uuidGen(r *rand.Rand, _ bool) *string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return s(h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:])
}

func timestampGen(tz bool) gen {
	return func(r *rand.Rand, edge bool) *string {
		suffix := ""
		if tz {
			suffix = []string{"+00", "+05:30", "-08", "+14"}[r.IntN(4)]
		}
		if edge {
			switch r.IntN(5) {
			case 0:
				return s("infinity")
			case 1:
				return s("-infinity")
			case 2:
				return s("0044-03-15 12:00:00" + suffix + " BC")
			case 3:
				return s("9999-12-31 23:59:59.999999" + suffix)
			default:
				return s("1900-01-01 00:00:00" + suffix) // before DateTime64's comfortable range
			}
		}
		y := 1950 + r.IntN(150)
		return s(fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d.%06d%s", y, r.IntN(12)+1, r.IntN(28)+1,
			r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1000000), suffix))
	}
}

func dateGen(r *rand.Rand, edge bool) *string {
	if edge {
		return s([]string{"infinity", "-infinity", "0001-01-01 BC", "5874897-12-31", "1582-10-04"}[r.IntN(5)])
	}
	return s(fmt.Sprintf("%04d-%02d-%02d", 1900+r.IntN(300), r.IntN(12)+1, r.IntN(28)+1))
}

func timeGen(r *rand.Rand, edge bool) *string {
	if edge {
		return s([]string{"00:00:00", "24:00:00", "23:59:59.999999"}[r.IntN(3)])
	}
	return s(fmt.Sprintf("%02d:%02d:%02d.%06d", r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1000000)))
}

func intervalGen(r *rand.Rand, edge bool) *string {
	if edge {
		return s([]string{"0", "-178000000 years", "1 mon -1 days", "-00:00:00.000001"}[r.IntN(4)])
	}
	return s(fmt.Sprintf("%d years %d mons %d days %02d:%02d:%02d.%d", r.IntN(10)-3, r.IntN(24), r.IntN(60)-30,
		r.IntN(48), r.IntN(60), r.IntN(60), r.IntN(1000)))
}

func jsonGen(binary bool) gen {
	return func(r *rand.Rand, edge bool) *string {
		if edge {
			return s([]string{`null`, `[]`, `{}`, `"just a string"`, `1.50`, `{"a": 1, "a": 2}`,
				`{"deep": {"er": [1, {"x": null}, "\u00e9\ud83e\udd86"]}}`, `12345678901234567890123456789.123456789`}[r.IntN(8)])
		}
		n := r.IntN(4)
		var b strings.Builder
		b.WriteString("{")
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, `"k%d": `, r.IntN(5))
			switch r.IntN(5) {
			case 0:
				fmt.Fprintf(&b, "%d", r.IntN(1000)-500)
			case 1:
				fmt.Fprintf(&b, "%d.%d0", r.IntN(100), r.IntN(100))
			case 2:
				fmt.Fprintf(&b, "%q", *textGen(12)(r, false))
			case 3:
				b.WriteString("[true, false, null]")
			default:
				b.WriteString(`{"nested": "yes"}`)
			}
		}
		b.WriteString("}")
		v := b.String()
		if !binary && r.IntN(3) == 0 {
			v = "  " + v + "\n" // json keeps whitespace; to_jsonb of the row normalizes it
		}
		return s(v)
	}
}

func byteaGen(r *rand.Rand, edge bool) *string {
	if edge {
		return s(`\x`)
	}
	b := make([]byte, r.IntN(64)+1)
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return s(`\x` + hex.EncodeToString(b))
}

var moods = []string{"sad", "ok", "happy", "ecstatic", `it's "complicated"`}

func enumGen(r *rand.Rand, _ bool) *string { return s(moods[r.IntN(len(moods))]) }

func inetGen(r *rand.Rand, edge bool) *string {
	if edge {
		return s([]string{"::1", "2001:db8::ff00:42:8329/64", "0.0.0.0/0"}[r.IntN(3)])
	}
	return s(fmt.Sprintf("10.%d.%d.%d/%d", r.IntN(256), r.IntN(256), r.IntN(256), 8+r.IntN(25)))
}

// arrayGen makes a one-dimensional array literal of elem values: empty
// arrays, NULL elements, and every element double-quoted and escaped when
// quote is set (or when it needs it).
func arrayGen(elem gen, quote bool) gen {
	return func(r *rand.Rand, edge bool) *string {
		if edge && r.IntN(2) == 0 {
			return s("{}")
		}
		n := r.IntN(4) + 1
		parts := make([]string, n)
		for i := range parts {
			if r.IntN(6) == 0 {
				parts[i] = "NULL"
				continue
			}
			v := *elem(r, edge && r.IntN(2) == 0)
			parts[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
		}
		return s("{" + strings.Join(parts, ",") + "}")
	}
}
