package reader

import (
	"testing"
)

// A few types end to end through the reader (the full matrix is
// shared/pgtypes' own test).
func TestTypesEndToEnd(t *testing.T) {
	e := newEnv(t, "public.ty")
	e.exec(`CREATE TYPE mood AS ENUM ('sad', 'happy');
		CREATE TABLE ty (tenant_id text, id int, n numeric(40,20), big numeric, f4 real, f8 double precision,
			b boolean, ts timestamptz, d date, u uuid, j jsonb, by bytea, arr int[], m mood, iv interval, tm time, grid int[][],
			PRIMARY KEY (tenant_id, id));`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO ty VALUES ('t', 1, 12345678901234567890.12345678901234567890, 'NaN', 1.5, 0.1,
		true, '2024-01-02 03:04:05.123456+02', '2024-02-29', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
		'{"b": [1, 2], "a": null}', '\xdeadbeef', '{1,NULL,3}', 'happy', '1 day 02:03:04', '12:34:56.789', '{{1,2},{3,4}}');
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
		// A column declared multi-dimensional travels as its text form.
		"grid": "{{1,2},{3,4}}",
	}
	for k, w := range want {
		if r[k] != w {
			t.Errorf("%s = %#v, want %#v", k, r[k], w)
		}
	}
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
