package export_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/sluice/internal/export"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/pgtypes"
)

func TestMain(m *testing.M) { chtest.Main(m) }

// kinds is a table with a column of every kind the contract types, and
// arrays of two.
var kinds = catalogtest.Table{
	Name: "public.kinds",
	Columns: []catalogtest.Col{
		{Name: "id", Kind: proto.KindInt64, PgType: "bigint"},
		{Name: "tenant", Kind: proto.KindText, PgType: "text"},
		{Name: "i16", Kind: proto.KindInt16, PgType: "smallint"},
		{Name: "i32", Kind: proto.KindInt32, PgType: "integer"},
		{Name: "num", Kind: proto.KindNumeric, PgType: "numeric"},
		{Name: "f32", Kind: proto.KindFloat32, PgType: "real"},
		{Name: "f64", Kind: proto.KindFloat64, PgType: "double precision"},
		{Name: "ok", Kind: proto.KindBool, PgType: "boolean"},
		{Name: "u", Kind: proto.KindUUID, PgType: "uuid"},
		{Name: "at", Kind: proto.KindTimestampTZ, PgType: "timestamp with time zone"},
		{Name: "local", Kind: proto.KindTimestamp, PgType: "timestamp without time zone"},
		{Name: "day", Kind: proto.KindDate, PgType: "date"},
		{Name: "tm", Kind: proto.KindTime, PgType: "time without time zone"},
		{Name: "iv", Kind: proto.KindInterval, PgType: "interval"},
		{Name: "js", Kind: proto.KindJSON, PgType: "json"},
		{Name: "jb", Kind: proto.KindJSONB, PgType: "jsonb"},
		{Name: "raw", Kind: proto.KindBytea, PgType: "bytea"},
		{Name: "mood", Kind: proto.KindEnum, PgType: "mood"},
		{Name: "comp", Kind: proto.KindToJSONB, PgType: "pair"},
		{Name: "pt", Kind: proto.KindOther, PgType: "point"},
		{Name: "ints", Kind: proto.ArrayKind(proto.KindInt32), PgType: "integer[]"},
		{Name: "tags", Kind: proto.ArrayKind(proto.KindText), PgType: "text[]"},
	},
	PK:      []string{"id"},
	Routing: "tenant",
}

func row(id int64) map[string]any {
	return map[string]any{
		"id": id, "tenant": "acme", "i16": int16(-7), "i32": int32(id * 1000), "num": fmt.Sprintf("12345678901234567890.%09d", id),
		"f32": 0.1, "f64": 1.0 / 3, "ok": id%2 == 0, "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"at": int64(1700000000123456) + id, "local": int64(-86400_000_000 * 365 * 3), "day": int32(19000 + id),
		"tm": "12:34:56.789", "iv": "1 day 02:03:04", "js": `{"b": [1, 2], "a": "x"}`, "jb": `{"a": 1, "b": {"c": null}}`,
		"raw": []byte{0, 1, 0xff, byte(id)}, "mood": "happy", "comp": `{"x": 1, "y": "two"}`, "pt": "(1,2)",
		"ints": []any{int32(1), nil, int32(3)}, "tags": []any{"a", "b \"quoted\"", nil},
	}
}

// fixture indexes and publishes two packs of kinds for destination acme
// (edge values, a NULL row, an update and a delete) and returns the catalog.
func fixture(t *testing.T) *catalog.Catalog {
	t.Helper()
	c := catalog.New(chtest.Conn(t), catalog.Options{Prefix: "sluice"})
	if err := c.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(t.TempDir(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	var rows []catalogtest.Row
	for id := int64(1); id <= 7; id++ {
		rows = append(rows, catalogtest.Ins(100, uint64(id), row(id)))
	}
	edge := row(8)
	edge["f64"], edge["f32"], edge["num"], edge["jb"] = math.NaN(), math.Inf(-1), "NaN", `"just a string"`
	edge["tags"], edge["ints"] = []any{}, nil
	rows = append(rows, catalogtest.Ins(100, 8, edge),
		catalogtest.Ins(100, 9, map[string]any{"id": int64(9), "tenant": "acme"})) // every other column NULL
	p1 := catalogtest.Write(t, store, kinds, "acme", "p1", rows)
	upd := row(2)
	upd["tm"] = "23:59:59.999999"
	p2 := catalogtest.Write(t, store, kinds, "acme", "p2", []catalogtest.Row{
		catalogtest.Upd(101, 1, upd),
		catalogtest.Del(101, 2, map[string]any{"id": int64(3), "tenant": "acme"}),
	})
	var refs []catalog.PackRef
	for _, m := range []packstore.PackMeta{p1, p2} {
		ref, err := catalog.ReadRef(t.Context(), store, m.Path())
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	if _, err := c.Index(t.Context(), store, refs); err != nil {
		t.Fatal(err)
	}
	l, err := c.AcquireLease(t.Context(), "test", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(t.Context(), l, 10*time.Second, 0x1000); err != nil {
		t.Fatal(err)
	}
	return c
}

// pager reads dest's table through the catalog's public Read, limit rows a
// page, pinned to version.
func pager(c *catalog.Catalog, dest, table string, version uint64, limit int) export.Pager {
	return func(ctx context.Context, after string) (export.Page, error) {
		p, err := c.Read(ctx, catalog.ReadRequest{Destination: dest, Table: table, Version: version, Cursor: after, Limit: limit})
		return export.Page{Rows: p.Rows, Next: p.Next}, err
	}
}

func columns(t *testing.T, c *catalog.Catalog, table string) []export.Column {
	t.Helper()
	ti, err := c.Table(t.Context(), table)
	if err != nil {
		t.Fatal(err)
	}
	var cols []export.Column
	for _, col := range ti.Columns {
		cols = append(cols, export.Column{Name: col.Name, Kind: col.Kind})
	}
	return cols
}

// readAll is what `sluice read` prints: every row, in order.
func readAll(t *testing.T, c *catalog.Catalog, version uint64) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	cur := ""
	for {
		p, err := c.Read(t.Context(), catalog.ReadRequest{Destination: "acme", Table: kinds.Name, Version: version, Cursor: cur, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Rows...)
		if p.Next == "" {
			return out
		}
		cur = p.Next
	}
}

func exportFile(t *testing.T, c *catalog.Catalog, f export.Format, version uint64) (string, int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), export.FileName(kinds.Name, f))
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var calls int
	n, err := export.Write(t.Context(), file, f, columns(t, c, kinds.Name), pager(c, "acme", kinds.Name, version, 3), func(int64) { calls++ })
	if err != nil {
		t.Fatal(err)
	}
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
	if calls < 3 {
		t.Fatalf("progress was reported %d times over 3-row pages of %d rows", calls, n)
	}
	return path, n
}

// readBack reads an exported Arrow or Parquet file through the catalog's
// engine (chDB's file() table function) and renders each row the way the
// read path renders values of each column's kind.
func readBack(t *testing.T, c *catalog.Catalog, path, format string, cols []export.Column) []json.RawMessage {
	t.Helper()
	res, err := c.Conn().Query(t.Context(), fmt.Sprintf("SELECT * FROM file('%s', %s)", path, format))
	if err != nil {
		t.Fatalf("reading %s back through chDB: %v", path, err)
	}
	if len(res.Columns) != len(cols) {
		t.Fatalf("chDB reads columns %v (%v), want %d", res.Columns, res.Types, len(cols))
	}
	nulls := nullLists(t, path, format, cols)
	var out []json.RawMessage
	for i, r := range res.Rows {
		for j := range cols {
			if nulls[j] != nil && nulls[j][i] {
				r[j] = nil
			}
		}
		out = append(out, render(t, res.Columns, r, cols))
	}
	return out
}

// nullLists reads, per array column, which rows hold a NULL list, with
// arrow-go's readers: ClickHouse has no NULL array, so chDB reads a NULL
// list as [] (the catalog keeps null markers for that reason).
func nullLists(t *testing.T, path, format string, cols []export.Column) [][]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tbl arrow.Table
	if format == "Parquet" {
		if tbl, err = pqarrow.ReadTable(t.Context(), f, nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator); err != nil {
			t.Fatal(err)
		}
	} else {
		r, err := ipc.NewFileReader(f)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var recs []arrow.RecordBatch
		for i := 0; i < r.NumRecords(); i++ {
			rec, err := r.RecordBatch(i)
			if err != nil {
				t.Fatal(err)
			}
			rec.Retain() // the reader's record is valid only until the next read
			defer rec.Release()
			recs = append(recs, rec)
		}
		tbl = array.NewTableFromRecords(r.Schema(), recs)
	}
	defer tbl.Release()
	out := make([][]bool, len(cols))
	for j, col := range cols {
		if _, ok := col.Kind.Elem(); !ok {
			continue
		}
		for _, chunk := range tbl.Column(j).Data().Chunks() {
			for i := 0; i < chunk.Len(); i++ {
				out[j] = append(out[j], chunk.IsNull(i))
			}
		}
	}
	return out
}

func render(t *testing.T, names []string, r []any, cols []export.Column) json.RawMessage {
	t.Helper()
	b := []byte{'{'}
	for i, col := range cols {
		if names[i] != col.Name {
			t.Fatalf("column %d is %s, want %s", i, names[i], col.Name)
		}
		if i > 0 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(col.Name)
		b = append(append(b, k...), ':')
		var err error
		if b, err = pgtypes.AppendJSON(b, col.Kind, r[i]); err != nil {
			t.Fatalf("column %s value %#v: %v", col.Name, r[i], err)
		}
	}
	return append(b, '}')
}

// compact normalizes JSON text so that two renderings of one value compare
// equal whatever their spacing (a JSON number is kept as written).
func compact(t *testing.T, rows []json.RawMessage) []string {
	t.Helper()
	out := make([]string, len(rows))
	for i, r := range rows {
		var v any
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("row %s: %v", r, err)
		}
		b, _ := json.Marshal(v)
		out[i] = string(b)
	}
	return out
}

func diff(t *testing.T, label string, want, got []string) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d rows, read has %d", label, len(got), len(want))
	}
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("%s row %d:\n got %s\nread %s", label, i, got[i], want[i])
		}
	}
}

// TestExportEqualsRead exports one destination's table in every format and
// checks each against the read path at the same snapshot: jsonl byte for
// byte, csv cell for cell, and the Arrow and Parquet files read back through
// the catalog engine (chDB file()), each value rendered by its column's
// kind, equal to the read's rows. Negative control: a value changed in the
// read-back rows is caught by the same comparison.
func TestExportEqualsRead(t *testing.T) {
	c := fixture(t)
	snaps, err := c.Snapshots(t.Context())
	if err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots %v: %v", snaps, err)
	}
	v := snaps[0].Version
	want := readAll(t, c, v)
	if len(want) != 8 { // 9 inserted, one deleted
		t.Fatalf("read has %d rows, want 8", len(want))
	}

	t.Run("jsonl", func(t *testing.T) {
		path, n := exportFile(t, c, export.JSONL, v)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var exp bytes.Buffer
		for _, r := range want {
			exp.Write(r)
			exp.WriteByte('\n')
		}
		if n != int64(len(want)) || !bytes.Equal(got, exp.Bytes()) {
			t.Fatalf("jsonl export (%d rows) differs from read:\n got %s\nread %s", n, got, exp.Bytes())
		}
	})

	t.Run("csv", func(t *testing.T) {
		path, _ := exportFile(t, c, export.CSV, v)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Count(string(got), "\n")
		if lines < len(want)+1 || !strings.HasPrefix(string(got), "id,tenant,i16,") {
			t.Fatalf("csv export:\n%s", got)
		}
		res, err := c.Conn().Query(t.Context(), fmt.Sprintf("SELECT * FROM file('%s', CSVWithNames, 'id Int64, tenant String, i16 String, i32 String, num String, f32 String, f64 String, ok String, u String, at String, local String, day String, tm String, iv String, js String, jb String, raw String, mood String, comp String, pt String, ints String, tags String')", path))
		if err != nil {
			t.Fatalf("reading the csv back through chDB: %v", err)
		}
		for i, r := range want {
			_, cells, err := export.OrderedCells(r)
			if err != nil {
				t.Fatal(err)
			}
			for j, cell := range cells {
				if got := fmt.Sprint(res.Rows[i][j]); got != export.SafeCSVCell(cell) || export.UnsafeCSVCell(got) != cell {
					t.Fatalf("csv row %d column %d: %q, read %q", i, j, got, cell)
				}
			}
		}
	})

	cols := columns(t, c, kinds.Name)
	for _, f := range []struct {
		format export.Format
		engine string
	}{{export.Parquet, "Parquet"}, {export.Arrow, "Arrow"}} {
		t.Run(string(f.format), func(t *testing.T) {
			path, n := exportFile(t, c, f.format, v)
			if n != int64(len(want)) {
				t.Fatalf("%d rows exported, read has %d", n, len(want))
			}
			got := readBack(t, c, path, f.engine, cols)
			diff(t, string(f.format), compact(t, want), compact(t, got))

			// Negative control: one changed value is caught.
			bad := append([]json.RawMessage{}, got...)
			bad[1] = json.RawMessage(strings.Replace(string(bad[1]), `"mood":"happy"`, `"mood":"sad"`, 1))
			if compact(t, bad)[1] == compact(t, want)[1] {
				t.Fatal("the comparison does not see a changed value")
			}
		})
	}
}
