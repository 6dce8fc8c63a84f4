package pgtypes

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/sluice-cdc/sluice/proto"
)

var fuzzKinds = func() []proto.Kind {
	scalars := []proto.Kind{
		proto.KindInt16, proto.KindInt32, proto.KindInt64, proto.KindNumeric, proto.KindFloat32,
		proto.KindFloat64, proto.KindBool, proto.KindText, proto.KindUUID, proto.KindTimestampTZ,
		proto.KindTimestamp, proto.KindDate, proto.KindTime, proto.KindInterval, proto.KindJSON,
		proto.KindJSONB, proto.KindToJSONB, proto.KindBytea, proto.KindEnum, proto.KindOther,
	}
	out := append([]proto.Kind{}, scalars...)
	for _, k := range scalars {
		out = append(out, proto.ArrayKind(k))
	}
	return out
}()

// FuzzAppendText: no input panics; a failed append appends nothing; an
// accepted value reads back and renders as valid JSON (json/jsonb text is
// not validated on the way in, so only those may fail to render).
func FuzzAppendText(f *testing.F) {
	seeds := []string{
		"1", "-32768", "9223372036854775807", "NaN", "-Infinity", "1.5e-10", "t", "\\x0102",
		"2026-01-01 12:34:56.5+05:30", "0044-03-15 BC", "infinity", "294276-12-31 23:59:59.999999",
		"{}", "{1,NULL,3}", `{"a\"b",NULL,"",x}`, "[0:1]={1,2}", "{{1},{2}}", `{"\\x00ff"}`,
		`{"2026-01-01 00:00:00+00",infinity}`, `{"{\"a\":1}"}`, "{", "\\", "", "12:34:56",
	}
	for i := range fuzzKinds {
		for _, s := range seeds {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, data []byte) {
		kind := fuzzKinds[int(k)%len(fuzzKinds)]
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		b := NewBuilder(mem, kind)
		defer b.Release()
		if err := AppendText(b, kind, data); err != nil {
			if b.Len() != 0 {
				t.Fatalf("%s %q: error %v but %d values appended", kind, data, err, b.Len())
			}
			return
		}
		if b.Len() != 1 {
			t.Fatalf("%s %q: %d values appended", kind, data, b.Len())
		}
		arr := b.NewArray()
		defer arr.Release()
		v, err := ValueOf(arr, 0, kind)
		if err != nil {
			t.Fatalf("%s %q: reading back: %v", kind, data, err)
		}
		out, err := AppendJSON(nil, kind, v)
		elem, _ := kind.Elem()
		if err != nil {
			if (kind == proto.KindJSON || kind == proto.KindJSONB || elem == proto.KindJSON || elem == proto.KindJSONB) && errors.Is(err, ErrValue) {
				return
			}
			t.Fatalf("%s %q: rendering %#v: %v", kind, data, v, err)
		}
		if !json.Valid(out) {
			t.Fatalf("%s %q: invalid JSON %q", kind, data, out)
		}
	})
}

// fuzzShape holds every form: a composite of numbers, booleans, timestamps,
// json, hstore, strings, vectors, a nested composite and arrays of them.
var fuzzShape = func() *Shape {
	inner := &Shape{form: formComposite, names: []string{"a", "b"}, attrs: []*Shape{numberShape, stringShape}}
	return &Shape{form: formArray, delim: ',', elem: &Shape{form: formComposite,
		names: []string{"n", "b", "t", "tz", "j", "h", "s", "v", "p", "ps", "box"},
		attrs: []*Shape{numberShape, boolShape, timestampShape, timestampTZShape, jsonShape, hstoreShape, stringShape,
			builtinShapes[int2vectorOID], inner, {form: formArray, delim: ',', elem: inner},
			{form: formArray, delim: ';', elem: stringShape}}}}
}()

// FuzzShape: no text panics a Shape; what it accepts is valid JSON.
func FuzzShape(f *testing.F) {
	for _, s := range []string{
		`{}`, `{NULL}`, `{"(1,t,\"2026-01-01 00:00:00\",\"2026-01-01 00:00:00+00\",{},\"a=>b\",x,\"1 2\",\"(1,x)\",{},{})"}`,
		`{"(,,,,,,,,,,)"}`, `[1:2]={"(-0.5e3,f,infinity,\"0044-01-01 00:00:00+05:30 BC\",null,,\"\"\"\",,,\"{\"\"(,)\"\"}\",\"{(1,1),(0,0);x}\")"}`,
		`{{"(1,,,,,,,,,,)"}}`, `{"(`, `{"(1e99999,,,,,,,,,,)"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := fuzzShape.AppendJSON(nil, data)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("%q: %v does not wrap ErrSyntax", data, err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%q: invalid JSON %q", data, out)
		}
	})
}
