package reader

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A few types end to end through the reader (the full matrix is
// shared/pgtypes' own test).
func TestTypesEndToEnd(t *testing.T) {
	e := newEnv(t, "public.ty")
	e.exec(`CREATE EXTENSION hstore;
		CREATE TYPE mood AS ENUM ('sad', 'happy');
		` + pairSQL + `
		CREATE TABLE ty (tenant_id text, id int, n numeric(40,20), big numeric, f4 real, f8 double precision,
			b boolean, ts timestamptz, d date, u uuid, j jsonb, by bytea, arr int[], m mood, iv interval, tm time, grid int[][],
			pr pair, pa pair[], h hstore, bx box[],
			PRIMARY KEY (tenant_id, id));`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO ty VALUES ('t', 1, 12345678901234567890.12345678901234567890, 'NaN', 1.5, 0.1,
		true, '2024-01-02 03:04:05.123456+02', '2024-02-29', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
		'{"b": [1, 2], "a": null}', '\xdeadbeef', '{1,NULL,3}', 'happy', '1 day 02:03:04', '12:34:56.789', '{{1,2},{3,4}}',
		'(2,b,{})', ARRAY['(1,"x,""y",{NULL})'::pair, NULL], 'a=>1, "b c"=>NULL', '{(1,1),(0,0);(2,2),(1,1)}');
		INSERT INTO ty (tenant_id, id) VALUES ('t', 2);`)
	rows := waitRows(t, e, 2)
	r := rows[0].vals
	want := map[string]any{
		"n":   "12345678901234567890.12345678901234567890",
		"big": "NaN",
		"f4":  float64(1.5),
		"f8":  0.1,
		"b":   true,
		"ts":  int64(1704157445123456),
		"d":   int64(19782),
		"u":   "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"m":   "happy",
		"iv":  "1 day 02:03:04",
		"tm":  "12:34:56.789",
	}
	for k, w := range want {
		if r[k] != w {
			t.Errorf("%s = %#v, want %#v", k, r[k], w)
		}
	}
	checkToJSONB(t, e, r, 1)
	if j, _ := r["j"].(string); j != `{"a": null, "b": [1, 2]}` {
		t.Errorf("jsonb = %#v", r["j"])
	}
	if by, _ := r["by"].([]byte); string(by) != "\xde\xad\xbe\xef" {
		t.Errorf("bytea = %#v", r["by"])
	}
	if arr, _ := r["arr"].([]any); len(arr) != 3 || arr[0] != int64(1) || arr[1] != nil || arr[2] != int64(3) {
		t.Errorf("int[] = %#v", r["arr"])
	}
	for k, v := range rows[1].vals {
		if k != "tenant_id" && k != "id" && v != nil {
			t.Errorf("row 2: %s = %#v, want NULL", k, v)
		}
	}
}

const pairSQL = `CREATE TYPE pair AS (a int, b text, c int[]);`

// toJSONBColumns are the columns of kind to_jsonb in TestTypesEndToEnd and
// TestTypesBackfill.
var toJSONBColumns = []string{"grid", "pr", "pa", "h", "bx"}

// checkToJSONB compares row r's composite, hstore, multi-dimensional and
// box[] values with the source's to_jsonb of row id, as JSON values.
func checkToJSONB(t *testing.T, e *env, r map[string]any, id int) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, col := range toJSONBColumns {
		var want string
		if err := conn.QueryRow(context.Background(), `SELECT to_jsonb(`+col+`)::text FROM ty WHERE id = $1`, id).Scan(&want); err != nil {
			t.Fatal(err)
		}
		got, _ := r[col].(string)
		var g, w any
		if err := json.Unmarshal([]byte(got), &g); err != nil || json.Unmarshal([]byte(want), &w) != nil || !reflect.DeepEqual(g, w) {
			t.Errorf("%s = %#v, want to_jsonb %s", col, r[col], want)
		}
	}
}

// TestTypesBackfill: the backfill converts to_jsonb columns as the stream
// does (the same resolver and batch builder).
func TestTypesBackfill(t *testing.T) {
	e := newEnv(t, "public.ty")
	e.cfg.Source.Backfill = true
	e.exec(`CREATE EXTENSION hstore;
		` + pairSQL + `
		CREATE TABLE ty (tenant_id text, id int, grid int[][], pr pair, pa pair[], h hstore, bx box[], PRIMARY KEY (tenant_id, id));
		ALTER TABLE ty REPLICA IDENTITY FULL;
		INSERT INTO ty VALUES ('t', 1, '[0:1][5:5]={{1},{NULL}}', '(,"a\\b ""c""",{})', '{NULL,"(1,,)"}', '"=>"=>"\\"', '{}');`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	rows := waitRows(t, e, 1)
	checkToJSONB(t, e, rows[0].vals, 1)
}
