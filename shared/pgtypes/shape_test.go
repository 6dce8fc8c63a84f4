package pgtypes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pglogrepl"
	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/pgtest"
)

const shapeSchemaSQL = `
CREATE EXTENSION hstore;
CREATE EXTENSION citext;
CREATE EXTENSION ltree;
CREATE EXTENSION cube;
CREATE TYPE ext AS (c citext, l ltree, q cube, r int4range, m money, b bit varying, x xml, v tsvector);
CREATE TYPE mood AS ENUM ('happy', 'it''s "x"');
CREATE TYPE pair AS (a int, b text, c int[]);
CREATE TYPE gone AS (x int, dropme text, y text);
ALTER TYPE gone DROP ATTRIBUTE dropme;
CREATE TYPE empty AS ();
CREATE DOMAIN pairdom AS pair;
CREATE DOMAIN intarr AS integer[];
CREATE TYPE nest AS (p pair, h hstore, f float8, r real, t timestamptz, ts timestamp, d date, j json, jb jsonb,
  by bytea, bo bool, n numeric, ps pair[], m mood, u uuid, iv interval, tm timetz, pt point, ia intarr[], g gone);
`

// shapeCases are (column type, values) from the data types and edge values
// of CDC test suites: composites (nested, NULL fields, quoting), hstore,
// multi-dimensional arrays, box[] (';' delimiter), arrays with bounds,
// domains over these, float digits and timestamps at sluice's int64 limit.
var shapeCases = []struct {
	typ    string
	values []string
}{
	{"pair", []string{`(2,b,{})`, `(,,)`, `(1,"",{NULL})`, `(-5,"a,b ""c"" \\d (e) ","{1,2}")`, `(7,"  ",)`, `(0,NULL,{})`, `(3,"é€😀 ""\n""",{})`}},
	{"pair[]", []string{`{}`, `{"(1,x,{})",NULL,"(,,)"}`, `{"(2,\"a,\"\"b\"\"\",\"{3,4}\")"}`, `[0:1]={"(1,a,)","(2,b,)"}`}},
	{"pairdom", []string{`(9,z,{9})`}},
	{"gone", []string{`(1,y)`, `(,)`}},
	{"empty", []string{`()`}},
	{"nest", []string{
		`("(1,""x,""""y"""""",""{1,NULL}"")","k=>v, ""a b""=>NULL",18014398509529112,33554448,"2026-01-01 05:30:00.5+05:30","294276-12-31 23:59:59.999999",infinity,"{""a"":1,""a"":2}","[1, 2.50]","\\x00ff",t,NaN,"{""(1,,)"",NULL}",happy,a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,"1 day -00:00:01","12:34:56+05:30","(1,2)","{""{1,2}"",NULL}","(5,w)")`,
		`(,,-0,1e-45,"0044-03-15 12:00:00+00 BC","4713-01-01 00:00:00 BC",-infinity,null,"{}","\\x",f,-0.00,{},"it's ""x""",,,,,{},)`,
		`(,,Infinity,-Infinity,-infinity,infinity,"0044-03-15 BC","""s""","""s""",,,1.50,,,,,,,,)`,
	}},
	{"nest[]", []string{`{NULL}`}},
	{"hstore", []string{``, `a=>1`, `"b c"=>NULL, "\"q"=>"x\\y", "=>"=>",", "NULL"=>"NULL"`, `ü=>"€ 😀", "k"=>""`}},
	{"hstore[]", []string{`{"a=>1",NULL,""}`}},
	{"integer[][]", []string{`{}`, `{{1,2},{3,4}}`, `{{NULL}}`, `[2:3][1:2]={{1,2},{3,4}}`, `{{{1},{2}},{{3},{4}}}`, `{1,2}`}},
	{"text[][]", []string{`{{"a b",NULL},{"\"","{}"}}`, `{{"NULL",null},{"",","}}`}},
	{"float8[][]", []string{`{{18014398509529112,-0},{NaN,-Infinity}}`}},
	{"box[]", []string{`{}`, `{(1,1),(0,0);"(2,2),(1,1)"}`, `{NULL}`}},
	{"intarr[]", []string{`{}`, `{"{1,2}",NULL,"{}"}`}},
	{"int2vector", []string{`1 2 3`, ``}},
	{"oidvector", []string{`23 25`}},
	{"integer[]", []string{`[2:3]={1,2}`, `{}`}},
	{"citext", []string{`MiXeD "q"`}},
	{"citext[]", []string{`{a,"B c",NULL}`}},
	{"ltree[]", []string{`{a.b.c,top}`}},
	{"cube", []string{`(1, 2), (3, 4)`}},
	{"ext", []string{`(AbC,a.b,"(1, 2)","[1,5)",$1.50,101,<a>x</a>,"'a' 'b':2")`, `(,,,,,,,)`}},
	{"ext[]", []string{`{"(x,y,\"(1)\",empty,-$0.01,,,)"}`}},
	{"money[]", []string{`{$1.00,-$2.50}`}},
	{"tstzrange[]", []string{`{"[2026-01-01 00:00:00+00,infinity)",empty}`}},
	{"point[]", []string{`{"(1,2)",NULL}`}},
	{"real", []string{`33554448`, `-0`, `1e-45`, `3.4028235e38`, `0.00024414062`, `NaN`, `-Infinity`, `1e6`, `123456`}},
	{"double precision", []string{`18014398509529112`, `-0`, `5e-324`, `1e15`, `1e-5`, `0.1`, `9007199254740993`, `1.7976931348623157e308`, `Infinity`}},
	{"timestamptz", []string{`294247-01-10 04:00:54.775806+00`, `4713-01-01 00:00:00+00 BC`}},
	{"timestamp", []string{`294247-01-10 04:00:54.775806`}},
}

// TestToJSONBShapes is the types contract against a real Postgres: for each
// type and edge value, pgoutput's text through the reader's path (Resolve,
// ResolveColumn, ResolveShape, AppendText, Arrow) and ArrowValueJSON equals
// the server's to_jsonb(row) value per column, numbers by exact decimal
// value (so float digits count).
func TestToJSONBShapes(t *testing.T) {
	dsn := pgtest.NewDB(t)
	conn := connect(t, dsn, sessionParams)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, shapeSchemaSQL); err != nil {
		t.Fatalf("creating types: %v", err)
	}
	var cols []string
	for i, c := range shapeCases {
		cols = append(cols, fmt.Sprintf("c%d %s", i, c.typ))
	}
	ddl := fmt.Sprintf("CREATE TABLE shapes (id int PRIMARY KEY, %s); CREATE PUBLICATION p FOR TABLE shapes;", strings.Join(cols, ", "))
	if _, err := conn.Exec(ctx, ddl); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot('s', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	id := 0
	for i, c := range shapeCases {
		for _, v := range c.values {
			id++
			if _, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO shapes (id, c%d) VALUES ($1, $2::text::%s)", i, c.typ), id, v); err != nil {
				t.Fatalf("inserting %s %q: %v", c.typ, v, err)
			}
		}
	}
	rel, tuples := pgoutputRows(t, conn)
	want := toJSONBRows(t, conn, `SELECT to_jsonb(s)::text FROM shapes s ORDER BY id`)
	if len(tuples) != id || len(want) != id {
		t.Fatalf("%d tuples, %d to_jsonb rows, want %d", len(tuples), len(want), id)
	}

	res := NewResolver(conn)
	type column struct {
		kind  proto.Kind
		shape *Shape
	}
	resolved := make([]column, len(rel.Columns))
	for i, c := range rel.Columns {
		kind, _, err := ResolveColumn(ctx, conn, rel.RelationID, c.Name)
		if err != nil {
			t.Fatalf("resolving %s: %v", c.Name, err)
		}
		resolved[i].kind = kind
		if kind == proto.KindToJSONB {
			if resolved[i].shape, err = res.Shape(ctx, c.DataType); err != nil {
				t.Fatalf("resolving the shape of %s: %v", c.Name, err)
			}
		}
	}
	for i, c := range shapeCases {
		k := resolved[i+1].kind
		_, isList := k.Elem()
		// Lists of a kind whose elements to_jsonb writes as that kind does.
		wantList := slices.Contains([]string{"integer[]", "point[]", "citext[]", "ltree[]", "money[]", "tstzrange[]"}, c.typ)
		switch {
		case wantList != isList:
			t.Errorf("%s: kind %s", c.typ, k)
		case !isList && strings.Contains(c.typ, "[]") && k != proto.KindToJSONB:
			t.Errorf("%s: kind %s, want %s", c.typ, k, proto.KindToJSONB)
		}
	}

	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	checked := 0
	for r, tup := range tuples {
		var row map[string]json.RawMessage
		if err := json.Unmarshal(want[r], &row); err != nil {
			t.Fatal(err)
		}
		for i, c := range rel.Columns {
			col := tup[i]
			if col.DataType != pglogrepl.TupleDataTypeText {
				continue
			}
			text := col.Data
			if sh := resolved[i].shape; sh != nil {
				var err error
				if text, err = sh.AppendJSON(nil, text); err != nil {
					t.Errorf("row %d %s: %v", r+1, c.Name, err)
					continue
				}
			}
			b := NewBuilder(mem, resolved[i].kind)
			if err := AppendText(b, resolved[i].kind, text); err != nil {
				t.Errorf("row %d %s: %v", r+1, c.Name, err)
				b.Release()
				continue
			}
			arr := b.NewArray()
			b.Release()
			got, err := ArrowValueJSON(arr, 0, resolved[i].kind)
			arr.Release()
			if err != nil {
				t.Errorf("row %d %s: %v", r+1, c.Name, err)
				continue
			}
			if err := jsonEqual(got, row[c.Name]); err != nil {
				t.Errorf("row %d %s (%s) from %q: %v\n got: %s\nwant: %s", r+1, c.Name, resolved[i].kind, clipS(col.Data), err, clipS(got), clipS(row[c.Name]))
			}
			checked++
		}
	}
	if checked < id {
		t.Errorf("checked %d values, want at least %d", checked, id)
	}
	t.Logf("%d values of %d types equal to_jsonb", checked, len(shapeCases))
}

// TestTimestampRange: every timestamp, timestamptz and date Postgres
// accepts reads back as to_jsonb gives it: its first and last instants and
// days, BC, 'infinity' and '-infinity', and the 29 years past int64
// microseconds since 1970 (294247-01-10 04:00:54.775807 on, carried folded:
// docs/adr/0038-timestamps-past-int64.md). A text past Postgres' range is
// refused with ErrOutOfRange (Postgres never writes one). Inside a
// composite or array (KindToJSONB) the text form is converted, with no
// range of its own.
func TestTimestampRange(t *testing.T) {
	conn := connect(t, pgtest.NewDB(t), sessionParams)
	ctx := context.Background()
	check := func(kind proto.Kind, typ, lit string) {
		t.Helper()
		res, err := conn.PgConn().Exec(ctx, fmt.Sprintf("SELECT '%s'::%s::text, to_jsonb('%[1]s'::%[2]s)::text", lit, typ)).ReadAll()
		if err != nil {
			t.Fatalf("%s %s: %v", typ, lit, err)
		}
		text, want := res[0].Rows[0][0], res[0].Rows[0][1]
		if got, err := roundTrip(t, kind, string(text)); err != nil || got != string(want) {
			t.Errorf("%s %s: %s %v, want %s", typ, text, got, err, want)
		}
	}
	for _, c := range []struct {
		kind proto.Kind
		typ  string
	}{{proto.KindTimestampTZ, "timestamptz"}, {proto.KindTimestamp, "timestamp"}} {
		for _, lit := range []string{
			"294247-01-10 04:00:54.775806", "294247-01-10 04:00:54.775807", "294247-01-10 04:00:54.775808",
			"294250-06-15 12:00:00.5", "294276-12-31 23:59:59.999999", "294276-12-31 00:00:00",
			"4713-01-01 00:00:00 BC", "4714-11-24 00:00:00 BC", "0001-12-31 23:59:59.999999 BC", "1970-01-01 00:00:00",
			"infinity", "-infinity",
		} {
			if c.kind == proto.KindTimestampTZ && !strings.HasSuffix(lit, "infinity") {
				lit = strings.Replace(lit, " BC", "+00 BC", 1)
				if !strings.HasSuffix(lit, " BC") {
					lit += "+00"
				}
			}
			check(c.kind, c.typ, lit)
		}
		for _, text := range []string{"294277-01-01 00:00:00", "4714-11-23 23:59:59.999999 BC", "9999999-01-01 00:00:00"} {
			if c.kind == proto.KindTimestampTZ {
				text = strings.Replace(text, " BC", "+00 BC", 1)
				if !strings.HasSuffix(text, " BC") {
					text += "+00"
				}
			}
			if _, err := roundTrip(t, c.kind, text); !errors.Is(err, ErrOutOfRange) {
				t.Errorf("%s %s: %v, want ErrOutOfRange", c.typ, text, err)
			}
		}
	}
	for _, lit := range []string{"5874897-12-31", "4714-11-24 BC", "0001-01-01 BC", "infinity", "-infinity"} {
		check(proto.KindDate, "date", lit)
	}
}
