package pgtypes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// sessionParams are the settings the reader must give its replication
// connection (see the package doc); the tests use them on a normal session,
// where pg_logical_slot_get_binary_changes runs pgoutput in the same backend.
var sessionParams = map[string]string{
	"DateStyle":          "ISO",
	"TimeZone":           "UTC",
	"IntervalStyle":      "postgres",
	"bytea_output":       "hex",
	"extra_float_digits": "3",
}

func connect(t *testing.T, dsn string, params map[string]string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

const schemaSQL = `
CREATE TYPE mood AS ENUM ('happy', 'sad', 'it''s "complicated"');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE DOMAIN shorttext AS varchar(8);
CREATE TABLE every (
  id int PRIMARY KEY,
  c_int2 smallint, c_int4 integer, c_int8 bigint,
  c_num numeric, c_num4020 numeric(40,20),
  c_real real, c_dbl double precision, c_bool boolean,
  c_text text, c_varchar varchar(10), c_char char(5), c_uuid uuid,
  c_tstz timestamptz, c_tstz3 timestamptz(3), c_ts timestamp, c_date date,
  c_time time, c_timetz timetz, c_interval interval,
  c_json json, c_jsonb jsonb, c_bytea bytea, c_enum mood, c_domain posint, c_dtext shorttext,
  a_int2 smallint[], a_int4 integer[], a_int8 bigint[], a_num numeric[],
  a_real real[], a_dbl double precision[], a_bool boolean[],
  a_text text[], a_varchar varchar(5)[], a_char char(3)[], a_uuid uuid[],
  a_tstz timestamptz[], a_ts timestamp[], a_date date[], a_time time[], a_interval interval[],
  a_json json[], a_jsonb jsonb[], a_bytea bytea[], a_enum mood[], a_domain posint[],
  o_point point, o_inet inet, o_range int4range, o_money money, o_bit bit varying, o_points point[],
  o_box box[], m_int4 integer[][]
);
CREATE PUBLICATION p FOR TABLE every;
`

const rowsSQL = `
INSERT INTO every (id) VALUES (1);
INSERT INTO every VALUES (2,
  1, 2, 3, 123.456, 1.5, 1.1, 0.1, true,
  'hello', 'var', 'ab', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11',
  '2026-01-01 12:34:56.5+05:30', '2026-01-01 12:34:56.1239', '2026-01-01 12:34:56.123456', '2026-01-01',
  '12:34:56.789', '12:34:56+05', '1 year 2 mons 3 days 04:05:06.789',
  '{"a": [1, 2.50, "x"], "b": null}', '{"a": [1, 2.50, "x"], "b": null}', '\x0102ab', 'happy', 7, 'short',
  '{1,2,NULL}', '{1,NULL,3}', '{9223372036854775807,-9223372036854775808}', '{1.5,NaN,NULL,-3}',
  '{1.1,NaN,Infinity,-Infinity,3.4028235e38,1e-45}', '{0.1,-0,1e300,NULL,5e-324}', '{t,f,NULL}',
  ARRAY['a,b', 'c"d', 'NULL', NULL, '', '  sp  ', 'back\slash', '{brace}', 'null', e'nl\nx', 'ünï €'],
  '{x,y}', '{ab,c}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}',
  ARRAY['2026-01-01 00:00:00+00', 'infinity', '-infinity', '1969-12-31 23:59:59.999999+00']::timestamptz[],
  '{"2026-01-01 00:00:00",-infinity}', ARRAY['2026-01-01', '0044-03-15 BC', 'infinity', NULL]::date[],
  '{00:00:00,23:59:59.999999,24:00:00}', '{"1 day","-00:00:01","1 year -2 mons"}',
  ARRAY['{"a":1}', '[1, 2]', '"s"', 'null']::json[], ARRAY['{"b":2}', '"s"', '3.0']::jsonb[],
  ARRAY['\x00ff'::bytea, ''::bytea, NULL, '\x5c22'::bytea], ARRAY['happy', 'it''s "complicated"']::mood[], '{1,2}',
  '(1,2)', '10.0.0.1/8', '[1,10)', 12.34, B'101', '{"(1,2)","(3.5,-4)"}',
  ARRAY['(1,1),(0,0)'::box, '(2,2),(1,1)'::box], '{{1,2},{3,4}}');
INSERT INTO every VALUES (3,
  -32768, 2147483647, -9223372036854775808, 'NaN', '12345678901234567890.12345678901234567890',
  'Infinity', '-Infinity', false,
  e'h\u00e9llo w\u00f6rld \u2713 \U0001F600 \n tab\t quote" backslash\\ ctl\x01', '', '', '00000000-0000-0000-0000-000000000000',
  'infinity', '-infinity', '-infinity', '0044-03-15 BC',
  '24:00:00', '00:00:00-03:30', '-1 years -2 mons +3 days -04:05:06',
  '  [1, {"k": "v", "k": "w"}, true, 1e400, -0.0]  ', '{"z": 1, "a": [true, false, null], "u": "\u00e9\n"}',
  '\x', 'it''s "complicated"', 1, '',
  '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}',
  NULL, NULL, 'empty', -92233720368547758.08, B'', '{}', '{}', '{}');
INSERT INTO every VALUES (4,
  32767, -2147483648, 9223372036854775807,
  '-123456789012345678901234567890.123456789012345678901234567890', '-0.00000000000000000001',
  'NaN', 'NaN', NULL,
  repeat('x€', 349525), NULL, 'abcde', NULL,
  '4713-01-01 00:00:00+00 BC', '294246-12-31 23:59:59.999', '294000-01-01 00:00:00', '5874897-12-31',
  '00:00:00', '23:59:59.999999+15:59', '0',
  '{}', '[]', NULL, NULL, NULL, NULL,
  '{-32768,32767}', NULL, NULL, NULL, '{NULL}', '{NULL,NULL}', NULL,
  '{""}', NULL, '{"   "}', NULL,
  ARRAY['4713-01-01 00:00:00+00 BC', '0001-01-01 00:00:00+00', '0001-12-31 23:59:59.5+00 BC']::timestamptz[],
  ARRAY['0001-01-01 00:00:00 BC']::timestamp[], '{"4713-11-24 BC","5874897-12-31"}', NULL, NULL,
  NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, '{{{1}}}');
INSERT INTO every VALUES (5,
  0, 0, 0, 'Infinity', '0.00000000000000000000', '1e6', '1e15', true,
  'plain', 'x', 'xyz', NULL,
  '2026-06-30 23:59:59.999999-08:00', '1970-01-01 00:00:00+00', '1970-01-01 00:00:00', '1970-01-01',
  '00:00:00.000001', '12:00:00+05:30', '178000000 years',
  '{"nested": {"deep": [[[]]]}, "num": 12345678901234567890123}', '{"num": 12345678901234567890123, "f": 1.5e-10}',
  '\xdeadbeef', 'sad', 2147483647, 'eightchr',
  NULL, NULL, NULL, '{-Infinity,Infinity,NaN,0.00}', '{1e6,123456,1e-5,0.0001}', '{1e15,123456789012345,1e-5}', NULL,
  '{"x y","\\\\","\""}', NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
UPDATE every SET c_real = '-1e-6', c_dbl = '123456789012345' WHERE id = 4;
`

// pgoutputRows returns the relation and the text tuples pgoutput sends for
// every insert and update on slot s, decoded by pglogrepl as the reader
// decodes them.
func pgoutputRows(t *testing.T, conn *pgx.Conn) (*pglogrepl.RelationMessage, [][]*pglogrepl.TupleDataColumn) {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT data FROM pg_logical_slot_get_binary_changes('s', NULL, NULL,
		'proto_version', '1', 'publication_names', 'p')`)
	if err != nil {
		t.Fatalf("reading slot: %v", err)
	}
	defer rows.Close()
	var rel *pglogrepl.RelationMessage
	var tuples [][]*pglogrepl.TupleDataColumn
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			t.Fatal(err)
		}
		msg, err := pglogrepl.Parse(data)
		if err != nil {
			t.Fatalf("parsing pgoutput message: %v", err)
		}
		switch m := msg.(type) {
		case *pglogrepl.RelationMessage:
			rel = m
		case *pglogrepl.InsertMessage:
			tuples = append(tuples, m.Tuple.Columns)
		case *pglogrepl.UpdateMessage:
			tuples = append(tuples, m.NewTuple.Columns)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading slot: %v", err)
	}
	if rel == nil {
		t.Fatal("no relation message")
	}
	return rel, tuples
}

var wantKinds = map[string]proto.Kind{
	"id": proto.KindInt32, "c_int2": proto.KindInt16, "c_int4": proto.KindInt32, "c_int8": proto.KindInt64,
	"c_num": proto.KindNumeric, "c_num4020": proto.KindNumeric, "c_real": proto.KindFloat32, "c_dbl": proto.KindFloat64,
	"c_bool": proto.KindBool, "c_text": proto.KindText, "c_varchar": proto.KindText, "c_char": proto.KindText,
	"c_uuid": proto.KindUUID, "c_tstz": proto.KindTimestampTZ, "c_tstz3": proto.KindTimestampTZ,
	"c_ts": proto.KindTimestamp, "c_date": proto.KindDate, "c_time": proto.KindTime, "c_timetz": proto.KindTime,
	"c_interval": proto.KindInterval, "c_json": proto.KindJSON, "c_jsonb": proto.KindJSONB, "c_bytea": proto.KindBytea,
	"c_enum": proto.KindEnum, "c_domain": proto.KindInt32, "c_dtext": proto.KindText,
	"a_int2": proto.ArrayKind(proto.KindInt16), "a_int4": proto.ArrayKind(proto.KindInt32),
	"a_int8": proto.ArrayKind(proto.KindInt64), "a_num": proto.ArrayKind(proto.KindNumeric),
	"a_real": proto.ArrayKind(proto.KindFloat32), "a_dbl": proto.ArrayKind(proto.KindFloat64),
	"a_bool": proto.ArrayKind(proto.KindBool), "a_text": proto.ArrayKind(proto.KindText),
	"a_varchar": proto.ArrayKind(proto.KindText), "a_char": proto.ArrayKind(proto.KindText),
	"a_uuid": proto.ArrayKind(proto.KindUUID), "a_tstz": proto.ArrayKind(proto.KindTimestampTZ),
	"a_ts": proto.ArrayKind(proto.KindTimestamp), "a_date": proto.ArrayKind(proto.KindDate),
	"a_time": proto.ArrayKind(proto.KindTime), "a_interval": proto.ArrayKind(proto.KindInterval),
	"a_json": proto.ArrayKind(proto.KindJSON), "a_jsonb": proto.ArrayKind(proto.KindJSONB),
	"a_bytea": proto.ArrayKind(proto.KindBytea), "a_enum": proto.ArrayKind(proto.KindEnum),
	"a_domain": proto.ArrayKind(proto.KindInt32),
	"o_point":  proto.KindOther, "o_inet": proto.KindOther, "o_range": proto.KindOther, "o_money": proto.KindOther,
	"o_bit": proto.KindOther, "o_points": proto.ArrayKind(proto.KindOther), "o_box": proto.KindToJSONB,
	"m_int4": proto.KindToJSONB, // declared int[][]: ResolveColumn
}

var wantPgTypes = map[string]string{
	"c_num4020": "numeric(40,20)", "c_varchar": "character varying(10)", "c_char": "character(5)",
	"c_tstz3": "timestamp(3) with time zone", "c_enum": "mood", "c_domain": "posint", "a_varchar": "character varying(5)[]",
	"a_enum": "mood[]", "m_int4": "integer[]", "c_timetz": "time with time zone",
}

// TestPostgresRoundTrip is the contract test: every contract type (and
// arrays of each, NULLs, NaN, ±Infinity, BC dates, infinite timestamps, a
// 1 MB text, unicode, other types) as pgoutput sends it, through
// AppendText -> Arrow -> Value -> AppendJSON, equals to_jsonb(row) per
// column as a JSON value.
func TestPostgresRoundTrip(t *testing.T) {
	dsn := pgtest.NewDB(t)
	conn := connect(t, dsn, sessionParams)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, schemaSQL); err != nil {
		t.Fatalf("creating schema: %v", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot('s', 'pgoutput')`); err != nil {
		t.Fatalf("creating slot: %v", err)
	}
	if _, err := conn.Exec(ctx, rowsSQL); err != nil {
		t.Fatalf("inserting rows: %v", err)
	}
	rel, tuples := pgoutputRows(t, conn)
	if len(tuples) != 6 {
		t.Fatalf("got %d tuples, want 6", len(tuples))
	}

	// Resolve each column the way the reader does, from the relation message.
	res := NewResolver(conn)
	kinds := make([]proto.Kind, len(rel.Columns))
	shapes := make([]*Shape, len(rel.Columns))
	for i, c := range rel.Columns {
		kind, pgType, err := res.Resolve(ctx, c.DataType, c.TypeModifier)
		if err != nil {
			t.Fatalf("resolving %s: %v", c.Name, err)
		}
		ck, cpg, err := ResolveColumn(ctx, conn, rel.RelationID, c.Name)
		if err != nil {
			t.Fatalf("resolving column %s: %v", c.Name, err)
		}
		if cpg != pgType {
			t.Errorf("%s: ResolveColumn type %q, Resolve %q", c.Name, cpg, pgType)
		}
		if ck != kind && c.Name != "m_int4" {
			t.Errorf("%s: ResolveColumn kind %s, Resolve %s", c.Name, ck, kind)
		}
		if want := wantKinds[c.Name]; ck != want {
			t.Errorf("%s (%s): kind %s, want %s", c.Name, pgType, ck, want)
		}
		if want, ok := wantPgTypes[c.Name]; ok && pgType != want {
			t.Errorf("%s: pg type %q, want %q", c.Name, pgType, want)
		}
		if k, ok := KindForOID(c.DataType); ok && k != kind {
			t.Errorf("%s: KindForOID %s, Resolve %s", c.Name, k, kind)
		}
		kinds[i] = ck
		if ck == proto.KindToJSONB {
			if shapes[i], err = res.Shape(ctx, c.DataType); err != nil {
				t.Fatalf("resolving the shape of %s: %v", c.Name, err)
			}
		}
	}

	// Arrow columns from the text forms, with a checked allocator.
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer func() {
		if !t.Failed() {
			mem.AssertSize(t, 0)
		}
	}()
	unchanged := map[[2]int]bool{}
	arrs := make([]arrow.Array, len(kinds))
	for i, k := range kinds {
		b := NewBuilder(mem, k)
		for r, tup := range tuples {
			col := tup[i]
			var text []byte
			switch col.DataType {
			case pglogrepl.TupleDataTypeText:
				text = col.Data
			case pglogrepl.TupleDataTypeNull:
			case pglogrepl.TupleDataTypeToast:
				// An unchanged TOASTed value on update: the reader sends NULL
				// and names the column in _sluice_unchanged.
				unchanged[[2]int{r, i}] = true
			default:
				t.Fatalf("row %d column %s: tuple data type %c", r, rel.Columns[i].Name, col.DataType)
			}
			if shapes[i] != nil && text != nil {
				var err error
				if text, err = shapes[i].AppendJSON(nil, text); err != nil {
					t.Fatalf("row %d column %s: %v", r, rel.Columns[i].Name, err)
				}
			}
			if err := AppendText(b, k, text); err != nil {
				t.Fatalf("row %d column %s: %v", r, rel.Columns[i].Name, err)
			}
		}
		arrs[i] = b.NewArray()
		b.Release()
	}
	defer func() {
		for _, a := range arrs {
			a.Release()
		}
	}()

	// to_jsonb(row) for the same rows, in slot order (by id, the update last).
	want := toJSONBRows(t, conn, `SELECT to_jsonb(e)::text FROM every e ORDER BY id`)
	want = append(want, want[3]) // the update of id 4 is the sixth tuple
	want[3] = toJSONBRows(t, conn, `SELECT ((to_jsonb(e) - 'c_real') - 'c_dbl')::text FROM every e WHERE id = 4`)[0]
	// Row 4 was updated after insert: its inserted real/double are checked
	// against literal values instead of to_jsonb.
	checked := 0
	for r := range tuples {
		var row map[string]json.RawMessage
		if err := json.Unmarshal(want[r], &row); err != nil {
			t.Fatal(err)
		}
		for i, c := range rel.Columns {
			if unchanged[[2]int{r, i}] {
				continue
			}
			got, err := ArrowValueJSON(arrs[i], r, kinds[i])
			if err != nil {
				t.Errorf("row %d column %s: %v", r, c.Name, err)
				continue
			}
			exp, ok := row[c.Name]
			if !ok {
				if r == 3 && (c.Name == "c_real" || c.Name == "c_dbl") {
					exp = json.RawMessage(map[string]string{"c_real": `"NaN"`, "c_dbl": `"NaN"`}[c.Name])
				} else {
					t.Fatalf("row %d: to_jsonb has no %s", r, c.Name)
				}
			}
			if err := jsonEqual(got, exp); err != nil {
				t.Errorf("row %d column %s (%s): %v\n got: %s\nwant: %s", r, c.Name, kinds[i], err, clipS(got), clipS(exp))
			}
			checked++
		}
	}
	t.Logf("%d values JSON-equal to to_jsonb", checked)
}

func clipS(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

func toJSONBRows(t *testing.T, conn *pgx.Conn, sql string) [][]byte {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, []byte(s))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// jsonEqual compares two JSON documents as values: numbers by exact
// decimal value, objects by key (the last duplicate wins, as in jsonb).
func jsonEqual(a, b []byte) error {
	va, err := decodeJSON(a)
	if err != nil {
		return fmt.Errorf("got invalid JSON: %w", err)
	}
	vb, err := decodeJSON(b)
	if err != nil {
		return fmt.Errorf("want invalid JSON: %w", err)
	}
	return equalValue(va, vb, "$")
}

func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

func equalValue(a, b any, path string) error {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return fmt.Errorf("%s: number %s vs %v", path, x, b)
		}
		rx, ok1 := new(big.Rat).SetString(string(x))
		ry, ok2 := new(big.Rat).SetString(string(y))
		if !ok1 || !ok2 || rx.Cmp(ry) != 0 {
			return fmt.Errorf("%s: number %s vs %s", path, x, y)
		}
		return nil
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return fmt.Errorf("%s: array %v vs %v", path, a, b)
		}
		for i := range x {
			if err := equalValue(x[i], y[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return fmt.Errorf("%s: object %v vs %v", path, a, b)
		}
		for k, v := range x {
			if err := equalValue(v, y[k], path+"."+k); err != nil {
				return err
			}
		}
		return nil
	default:
		if a != b {
			return fmt.Errorf("%s: %#v vs %#v", path, a, b)
		}
		return nil
	}
}

// TestTimestampOffsets reads timestamptz text written in sessions with
// other time zones (offsets like +05:45, -03:30 and historical LMT offsets
// with seconds) and checks each parses to the instant the UTC session gives.
func TestTimestampOffsets(t *testing.T) {
	dsn := pgtest.NewDB(t)
	utc := connect(t, dsn, sessionParams)
	ctx := context.Background()
	values := []string{
		"2026-01-01 12:34:56.5+00", "1890-01-01 00:00:00+00", "1800-06-01 12:00:00.123456+00",
		"0044-03-15 12:00:00+00 BC", "1969-12-31 23:59:59.999999+00", "2026-07-01 00:00:00+00",
	}
	zones := []string{"UTC", "Asia/Kathmandu", "America/St_Johns", "Europe/Amsterdam", "Asia/Kolkata", "Pacific/Chatham", "America/Los_Angeles"}
	for _, zone := range zones {
		p := map[string]string{}
		for k, v := range sessionParams {
			p[k] = v
		}
		p["TimeZone"] = zone
		zc := connect(t, dsn, p)
		for _, v := range values {
			var inUTC, inZone string
			// Simple protocol: text results straight from timestamptz_out.
			r := utc.PgConn().Exec(ctx, fmt.Sprintf("SELECT '%s'::timestamptz", v))
			res, err := r.ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			inUTC = string(res[0].Rows[0][0])
			res, err = zc.PgConn().Exec(ctx, fmt.Sprintf("SELECT '%s'::timestamptz", v)).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			inZone = string(res[0].Rows[0][0])
			a, err1 := parseTimestamp([]byte(inUTC), true)
			b, err2 := parseTimestamp([]byte(inZone), true)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: parsing %q / %q: %v %v", zone, inUTC, inZone, err1, err2)
			}
			if a != b {
				t.Errorf("%s: %q -> %d, %q -> %d", zone, inUTC, a, inZone, b)
			}
		}
	}
}

func TestResolveEdges(t *testing.T) {
	dsn := pgtest.NewDB(t)
	conn := connect(t, dsn, sessionParams)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `
CREATE DOMAIN intarr AS integer[];
CREATE DOMAIN d2 AS intarr;
CREATE TYPE pair AS (a int, b text);
CREATE SCHEMA hidden;
CREATE TYPE hidden.color AS ENUM ('red');
CREATE TABLE edge (a intarr, b d2, c intarr[], d pair, e pair[], f hidden.color[], g int2vector, h tsvector, i int4range[]);
`); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		kind   proto.Kind
		pgType string
	}{
		"a": {proto.ArrayKind(proto.KindInt32), "intarr"},
		"b": {proto.ArrayKind(proto.KindInt32), "d2"},
		"c": {proto.KindToJSONB, "intarr[]"},
		"d": {proto.KindToJSONB, "pair"},
		"e": {proto.KindToJSONB, "pair[]"},
		"f": {proto.ArrayKind(proto.KindEnum), "hidden.color[]"},
		"g": {proto.KindToJSONB, "int2vector"},
		"h": {proto.KindOther, "tsvector"},
		"i": {proto.ArrayKind(proto.KindOther), "int4range[]"},
	}
	var relid uint32
	if err := conn.QueryRow(ctx, `SELECT 'edge'::regclass::oid`).Scan(&relid); err != nil {
		t.Fatal(err)
	}
	for col, w := range want {
		kind, pgType, err := ResolveColumn(ctx, conn, relid, col)
		if err != nil {
			t.Fatalf("%s: %v", col, err)
		}
		if kind != w.kind || pgType != w.pgType {
			t.Errorf("%s: %s %q, want %s %q", col, kind, pgType, w.kind, w.pgType)
		}
	}
	// An OID that names no type (dropped since the relation was described).
	kind, pgType, err := Resolve(ctx, conn, 4_000_000_000, -1)
	if err != nil || kind != proto.KindOther {
		t.Errorf("unknown oid: %s %q %v", kind, pgType, err)
	}
}
