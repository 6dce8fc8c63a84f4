package pgtypes

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/sluice-cdc/sluice/proto"
)

// roundTrip appends text as kind and returns the JSON of the value.
func roundTrip(t *testing.T, kind proto.Kind, text string) (string, error) {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := NewBuilder(mem, kind)
	defer b.Release()
	if err := AppendText(b, kind, []byte(text)); err != nil {
		if b.Len() != 0 {
			t.Errorf("%s %q: failed AppendText left %d values", kind, text, b.Len())
		}
		return "", err
	}
	arr := b.NewArray()
	defer arr.Release()
	out, err := ArrowValueJSON(arr, 0, kind)
	return string(out), err
}

func TestAppendTextJSON(t *testing.T) {
	arr := proto.ArrayKind
	cases := []struct {
		kind       proto.Kind
		text, want string
	}{
		{proto.KindInt16, "-32768", "-32768"},
		{proto.KindInt32, "2147483647", "2147483647"},
		{proto.KindInt64, "-9223372036854775808", "-9223372036854775808"},
		{proto.KindFloat32, "1.1", "1.1"},
		// As to_jsonb writes them: float4out/float8out's digits read into a
		// numeric (no exponent, no negative zero); TestFloatsAsPostgresPrints
		// checks these against the server for many values.
		{proto.KindFloat32, "3.4028235e+38", "340282350000000000000000000000000000000"},
		{proto.KindFloat32, "1e+06", "1000000"},
		{proto.KindFloat32, "-0", "0"},
		{proto.KindFloat32, "3.3554448e+07", "33554448"},
		{proto.KindFloat64, "0.1", "0.1"},
		{proto.KindFloat64, "1e+15", "1000000000000000"},
		{proto.KindFloat64, "1.8014398509529112e+16", "18014398509529112"},
		{proto.KindFloat64, "123456789012345", "123456789012345"},
		{proto.KindFloat64, "1.5e-10", "0.00000000015"},
		{proto.KindFloat64, "NaN", `"NaN"`},
		{proto.KindFloat64, "-Infinity", `"-Infinity"`},
		{proto.KindNumeric, "-0.00000000000000000001", "-0.00000000000000000001"},
		{proto.KindNumeric, "Infinity", `"Infinity"`},
		{proto.KindBool, "t", "true"},
		{proto.KindText, "a\"b\\c\n\x01é", `"a\"b\\c\n\u0001é"`},
		{proto.KindText, "", `""`},
		{proto.KindBytea, `\x0102ab`, `"\\x0102ab"`},
		{proto.KindBytea, `\x`, `"\\x"`},
		{proto.KindBytea, `a\\b\000`, `"\\x615c6200"`},
		{proto.KindJSON, ` {"a": [1, 2]} `, ` {"a": [1, 2]} `},
		{proto.KindTimestampTZ, "2026-01-01 00:00:00+00", `"2026-01-01T00:00:00+00:00"`},
		{proto.KindTimestampTZ, "2026-01-01 05:30:00.5+05:30", `"2026-01-01T00:00:00.5+00:00"`},
		{proto.KindTimestampTZ, "2025-12-31 20:29:59.123456-03:30", `"2025-12-31T23:59:59.123456+00:00"`},
		{proto.KindTimestampTZ, "1890-01-01 00:19:32+00:19:32", `"1890-01-01T00:00:00+00:00"`},
		{proto.KindTimestampTZ, "0044-03-15 12:00:00+00 BC", `"0044-03-15T12:00:00+00:00 BC"`},
		{proto.KindTimestampTZ, "infinity", `"infinity"`},
		{proto.KindTimestamp, "-infinity", `"-infinity"`},
		{proto.KindTimestamp, "294000-01-01 00:00:00", `"294000-01-01T00:00:00"`},
		{proto.KindTimestamp, "1969-12-31 23:59:59.999999", `"1969-12-31T23:59:59.999999"`},
		{proto.KindDate, "0001-01-01 BC", `"0001-01-01 BC"`},
		{proto.KindDate, "5874897-12-31", `"5874897-12-31"`},
		{proto.KindDate, "2000-02-29", `"2000-02-29"`},
		{proto.KindTime, "24:00:00", `"24:00:00"`},
		{arr(proto.KindInt32), "{}", "[]"},
		{arr(proto.KindInt32), "[0:1]={1,2}", "[1,2]"},
		{arr(proto.KindInt32), "{1, NULL ,null}", "[1,null,null]"},
		{arr(proto.KindText), `{"a,b","c\"d",NULL,"NULL","",x\ y,"  "}`, `["a,b","c\"d",null,"NULL","","x y","  "]`},
		{arr(proto.KindBytea), `{"\\x00ff",NULL}`, `["\\x00ff",null]`},
		{arr(proto.KindTimestampTZ), `{"2026-01-01 00:00:00+00",infinity}`, `["2026-01-01T00:00:00+00:00","infinity"]`},
		{arr(proto.KindJSONB), `{"{\"a\": 1}",null}`, `[{"a": 1},null]`},
		{arr(proto.KindFloat32), `{NaN,1.1}`, `["NaN",1.1]`},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", c.kind, c.text), func(t *testing.T) {
			want := c.want
			got, err := roundTrip(t, c.kind, c.text)
			if err != nil {
				t.Fatalf("AppendText: %v", err)
			}
			if got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}

func TestAppendTextRejects(t *testing.T) {
	arr := proto.ArrayKind
	cases := []struct {
		kind proto.Kind
		text string
		want error
	}{
		{proto.KindInt16, "32768", ErrOutOfRange},
		{proto.KindInt32, "-2147483649", ErrOutOfRange},
		{proto.KindInt64, "9223372036854775808", ErrOutOfRange},
		{proto.KindInt64, "99999999999999999999", ErrOutOfRange},
		{proto.KindInt32, "", ErrSyntax},
		{proto.KindInt32, "1.0", ErrSyntax},
		{proto.KindFloat32, "1e39", ErrOutOfRange},
		{proto.KindFloat64, "x", ErrSyntax},
		{proto.KindNumeric, "1e5", ErrSyntax},
		{proto.KindNumeric, ".5", ErrSyntax},
		{proto.KindBool, "yes", ErrSyntax},
		{proto.KindBytea, `\x0`, ErrSyntax},
		{proto.KindBytea, `\xzz`, ErrSyntax},
		{proto.KindDate, "2026-02-29", ErrSyntax},
		{proto.KindDate, "0000-01-01", ErrSyntax},
		{proto.KindTimestamp, "2026-01-01 00:00:00+00", ErrSyntax},
		{proto.KindTimestampTZ, "2026-01-01 00:00:00", ErrSyntax},
		{proto.KindTimestampTZ, "2026-01-01 24:00:00+00", ErrSyntax},
		{proto.KindTimestampTZ, "2026-01-01 00:00:00.1234567+00", ErrSyntax},
		{proto.KindTimestamp, "294277-01-01 00:00:00", ErrOutOfRange},
		{arr(proto.KindInt32), "{{1,2},{3,4}}", ErrMultiDim},
		{arr(proto.KindInt32), "[1:2][1:1]={{1},{2}}", ErrMultiDim},
		{arr(proto.KindInt32), "{1,x}", ErrSyntax},
		{arr(proto.KindInt32), "{1,}", ErrSyntax},
		{arr(proto.KindInt32), "{1", ErrSyntax},
		{arr(proto.KindInt32), "{1} x", ErrSyntax},
		{arr(proto.KindText), `{"a}`, ErrSyntax},
		{arr(proto.KindText), `{a"b}`, ErrSyntax},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", c.kind, c.text), func(t *testing.T) {
			_, err := roundTrip(t, c.kind, c.text)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func TestAppendTextBuilderMismatch(t *testing.T) {
	mem := memory.NewGoAllocator()
	b := NewBuilder(mem, proto.KindInt32)
	defer b.Release()
	if err := AppendText(b, proto.KindText, []byte("x")); !errors.Is(err, ErrBuilder) {
		t.Errorf("text into int32 builder: %v", err)
	}
	if err := AppendText(b, "nonsense", []byte("x")); !errors.Is(err, ErrKind) {
		t.Errorf("unknown kind: %v", err)
	}
	if err := AppendText(nil, proto.KindInt32, []byte("1")); !errors.Is(err, ErrBuilder) {
		t.Errorf("nil builder: %v", err)
	}
	if err := AppendText(b, proto.ArrayKind(proto.KindInt32), []byte("{1}")); !errors.Is(err, ErrBuilder) {
		t.Errorf("array into scalar builder: %v", err)
	}
	if NewBuilder(mem, "nonsense") != nil {
		t.Error("NewBuilder of an unknown kind is not nil")
	}
	if err := AppendText(b, proto.KindInt32, nil); err != nil || b.Len() != 1 || !b.(*array.Int32Builder).IsNull(0) {
		t.Errorf("nil text: %v, len %d", err, b.Len())
	}
}

// TestArrayErrorAppendsNothing: a bad element anywhere leaves the builder
// as it was. Negative control: with validateArrayFirst off the elements
// before the bad one are left in the child builder.
func TestArrayErrorAppendsNothing(t *testing.T) {
	check := func() (parent, child int) {
		mem := memory.NewGoAllocator()
		b := NewBuilder(mem, proto.ArrayKind(proto.KindInt32)).(*array.ListBuilder)
		defer b.Release()
		if err := AppendText(b, proto.ArrayKind(proto.KindInt32), []byte("{1,2,x,4}")); !errors.Is(err, ErrSyntax) {
			t.Fatalf("bad element: %v", err)
		}
		return b.Len(), b.ValueBuilder().Len()
	}
	if p, c := check(); p != 0 || c != 0 {
		t.Fatalf("failed append left %d lists, %d elements", p, c)
	}
	validateArrayFirst = false
	defer func() { validateArrayFirst = true }()
	if _, c := check(); c == 0 {
		t.Fatal("negative control: without validation first the child builder should hold partial elements")
	}
}

// TestFiniteNeverSentinel: a finite timestamp or date never takes the value
// that means infinity: the finite instant MaxInt64 microseconds after 1970
// reads back as itself (folded with the instants after it), the day
// MaxInt32 (past Postgres' dates) is refused. Negative control: without
// refuseSentinels both read back as "infinity".
func TestFiniteNeverSentinel(t *testing.T) {
	days, inDay := splitMicros(math.MaxInt64)
	y, m, d := civilFromDays(days)
	ts := fmt.Sprintf("%d-%02d-%02d %02d:%02d:%02d.%06d", y, m, d,
		inDay/3_600_000_000, inDay/60_000_000%60, inDay/1_000_000%60, inDay%1_000_000)
	y, m, d = civilFromDays(math.MaxInt32)
	date := fmt.Sprintf("%d-%02d-%02d", y, m, d)
	want := `"` + strings.Replace(ts, " ", "T", 1) + `"`
	if got, err := roundTrip(t, proto.KindTimestamp, ts); err != nil || got != want {
		t.Fatalf("timestamp %s: %s %v, want %s", ts, got, err, want)
	}
	if _, err := roundTrip(t, proto.KindDate, date); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("date %s: %v, want ErrOutOfRange", date, err)
	}
	refuseSentinels = false
	defer func() { refuseSentinels = true }()
	if got, err := roundTrip(t, proto.KindTimestamp, ts); err != nil || got != `"infinity"` {
		t.Fatalf("negative control: got %s %v, want the finite value misread as \"infinity\"", got, err)
	}
	if got, err := roundTrip(t, proto.KindDate, date); err != nil || got != `"infinity"` {
		t.Fatalf("negative control: got %s %v, want the finite value misread as \"infinity\"", got, err)
	}
}

// TestTimestampsAgainstTime checks parse and render against Go's time
// package for random instants in years 1..9999.
func TestTimestampsAgainstTime(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	lo := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	hi := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).UnixMicro()
	for range 20000 {
		us := lo + r.Int64N(hi-lo)
		if r.IntN(4) == 0 {
			us -= us % 1_000_000
		}
		tm := time.UnixMicro(us).UTC()
		text := tm.Format("2006-01-02 15:04:05.999999") + "+00"
		got, err := parseTimestamp([]byte(text), true)
		if err != nil || got != us {
			t.Fatalf("%s: %d %v, want %d", text, got, err, us)
		}
		js := string(appendTimestampJSON(nil, us, true))
		if want := `"` + tm.Format("2006-01-02T15:04:05.999999") + `+00:00"`; js != want {
			t.Fatalf("%d: %s, want %s", us, js, want)
		}
		days := us / 86_400_000_000
		if us < 0 && us%86_400_000_000 != 0 {
			days--
		}
		if got, err := parseDate([]byte(tm.Format("2006-01-02"))); err != nil || got != days {
			t.Fatalf("date %s: %d %v, want %d", tm.Format("2006-01-02"), got, err, days)
		}
	}
}

// TestAppendJSONCatalogValues: the shapes the catalog returns (float32
// widened to float64, bytea as string, unsigned integers, typed slices).
func TestAppendJSONCatalogValues(t *testing.T) {
	cases := []struct {
		kind proto.Kind
		v    any
		want string
	}{
		{proto.KindFloat32, float64(float32(1.1)), "1.1"},
		{proto.KindFloat32, math.Inf(1), `"Infinity"`},
		{proto.KindBytea, "\x01\x02\xab", `"\\x0102ab"`},
		{proto.KindText, []byte("x"), `"x"`},
		{proto.KindText, "bad\xffutf8", `"bad\ufffdutf8"`},
		{proto.KindInt64, uint64(7), "7"},
		{proto.KindInt16, int16(-3), "-3"},
		{proto.KindInt32, float64(12), "12"},
		{proto.KindBool, uint64(1), "true"},
		{proto.KindNumeric, "12.50", "12.50"},
		{proto.KindNumeric, "nan", `"NaN"`},
		{proto.KindDate, int64(0), `"1970-01-01"`},
		{proto.KindDate, arrow.Date32(-719528), `"0001-01-01 BC"`},
		{proto.KindTimestampTZ, arrow.Timestamp(1), `"1970-01-01T00:00:00.000001+00:00"`},
		{proto.KindTimestamp, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), `"2026-01-02T03:04:05"`},
		{proto.KindJSONB, `{"a":1}`, `{"a":1}`},
		{proto.ArrayKind(proto.KindText), []string{"a", "b"}, `["a","b"]`},
		{proto.ArrayKind(proto.KindInt64), []any{int64(1), nil, uint64(3)}, `[1,null,3]`},
		{proto.ArrayKind(proto.KindInt64), []*int64{nil}, `[null]`},
		{proto.ArrayKind(proto.KindBytea), []any{"\x00"}, `["\\x00"]`},
		{proto.KindText, nil, "null"},
	}
	for _, c := range cases {
		got, err := AppendJSON([]byte("prefix:"), c.kind, c.v)
		if err != nil {
			t.Errorf("%s %#v: %v", c.kind, c.v, err)
			continue
		}
		if string(got) != "prefix:"+c.want {
			t.Errorf("%s %#v: got %s, want %s", c.kind, c.v, got, c.want)
		}
	}
	bad := []struct {
		kind proto.Kind
		v    any
	}{
		{proto.KindInt64, "x"}, {proto.KindInt64, 1.5}, {proto.KindJSON, "{"}, {proto.KindNumeric, "1,5"},
		{proto.KindBool, 2}, {proto.KindText, 3}, {proto.ArrayKind(proto.KindInt32), 5},
		{proto.ArrayKind(proto.KindInt32), []any{1, "x"}}, {"nonsense", 1}, {proto.KindDate, int64(1) << 40},
	}
	for _, c := range bad {
		got, err := AppendJSON([]byte("keep"), c.kind, c.v)
		if !errors.Is(err, ErrValue) && !errors.Is(err, ErrKind) {
			t.Errorf("%s %#v: error %v", c.kind, c.v, err)
		}
		if string(got) != "keep" {
			t.Errorf("%s %#v: dst changed to %q", c.kind, c.v, got)
		}
	}
}

func TestValueOfMismatch(t *testing.T) {
	mem := memory.NewGoAllocator()
	b := NewBuilder(mem, proto.KindInt32)
	defer b.Release()
	_ = AppendText(b, proto.KindInt32, []byte("5"))
	a := b.NewArray()
	defer a.Release()
	if v, err := ValueOf(a, 0, proto.KindText); err == nil || v != nil {
		t.Errorf("int32 read as text: %v %v", v, err)
	}
	if v := Value(a, 3, proto.KindInt32); v != nil {
		t.Errorf("out of range: %v", v)
	}
	if v := Value(a, 0, proto.KindInt32); v != int64(5) {
		t.Errorf("value %#v", v)
	}
	if _, err := json.Marshal(Value(a, 0, proto.KindInt32)); err != nil {
		t.Error(err)
	}
}
