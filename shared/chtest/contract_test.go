package chtest_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/chtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(chtestMain{m}, goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// chtestMain lets goleak run chtest.Main's cleanup before it checks.
type chtestMain struct{ m *testing.M }

func (c chtestMain) Run() int {
	code := c.m.Run()
	chtest.Close()
	return code
}

func query(t *testing.T, c catalog.Conn, q string) *catalog.Result {
	t.Helper()
	res, err := c.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return res
}

func exec(t *testing.T, c catalog.Conn, q string) {
	t.Helper()
	if err := c.Exec(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// equal is reflect.DeepEqual that also equates NaN with NaN.
func equal(a, b any) bool {
	if fa, ok := a.(float64); ok {
		if fb, ok := b.(float64); ok && math.IsNaN(fa) && math.IsNaN(fb) {
			return true
		}
	}
	return reflect.DeepEqual(a, b)
}

// TestConnContract runs the catalog.Conn contract on every backend.
func TestConnContract(t *testing.T) {
	for _, b := range chtest.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Run("types", func(t *testing.T) { testTypes(t, b.Conn) })
			t.Run("ddl_insert_replacing_final", func(t *testing.T) { testReplacing(t, b.Conn) })
			t.Run("insert_select_subquery", func(t *testing.T) { testInsertSelect(t, b.Conn) })
			t.Run("empty_result_names_columns", func(t *testing.T) { testEmpty(t, b.Conn) })
			t.Run("errors", func(t *testing.T) { testErrors(t, b.Conn) })
			t.Run("concurrent", func(t *testing.T) { testConcurrent(t, b.Conn) })
			if b.Name != "server" { // file() reads the server's own disk
				t.Run("arrow_file", func(t *testing.T) { testArrowFile(t, b.Conn) })
			}
		})
	}
}

func testTypes(t *testing.T, c catalog.Conn) {
	cases := []struct {
		expr, typ string
		want      any
	}{
		{"toInt8(-128)", "Int8", int64(-128)},
		{"toInt16(-32768)", "Int16", int64(-32768)},
		{"toInt32(-2147483648)", "Int32", int64(math.MinInt32)},
		{"toInt64(-9223372036854775808)", "Int64", int64(math.MinInt64)},
		{"toInt64(9223372036854775807)", "Int64", int64(math.MaxInt64)},
		{"toUInt8(255)", "UInt8", uint64(255)},
		{"toUInt16(65535)", "UInt16", uint64(65535)},
		{"toUInt32(4294967295)", "UInt32", uint64(math.MaxUint32)},
		{"toUInt64(18446744073709551615)", "UInt64", uint64(math.MaxUint64)},
		{"toFloat32(0.1)", "Float32", float64(float32(0.1))},
		{"toFloat32(nan)", "Float32", math.NaN()},
		{"toFloat32(inf)", "Float32", math.Inf(1)},
		{"toFloat32(-inf)", "Float32", math.Inf(-1)},
		{"toFloat64(0.1)", "Float64", 0.1},
		{"toFloat64(5e-324)", "Float64", 5e-324},
		{"toFloat64(1.7976931348623157e308)", "Float64", math.MaxFloat64},
		{"nan", "Float64", math.NaN()},
		{"-inf", "Float64", math.Inf(-1)},
		{"toDecimal128('12345678901234567890.1234567891', 10)", "Decimal(38, 10)", "12345678901234567890.1234567891"},
		{"toDecimal128('-0.5', 10)", "Decimal(38, 10)", "-0.5"},
		{"toDecimal64('1.50', 2)", "Decimal(18, 2)", "1.5"},
		{"toDecimal256('123456789012345678901234567890123456789012345678901234567890.5', 1)", "Decimal(76, 1)", "123456789012345678901234567890123456789012345678901234567890.5"},
		{"'a\\xFF\\x00b\\n'", "String", "a\xff\x00b\n"},
		{"''", "String", ""},
		{"toFixedString('ab', 3)", "FixedString(3)", "ab\x00"},
		{"CAST([NULL, 'x', ''] AS Array(Nullable(String)))", "Array(Nullable(String))", []any{nil, "x", ""}},
		{"CAST([] AS Array(Nullable(String)))", "Array(Nullable(String))", []any{}},
		{"[toInt64(1), 2]", "Array(Int64)", []any{int64(1), int64(2)}},
		{"[[toUInt8(1)], []]", "Array(Array(UInt8))", []any{[]any{uint64(1)}, []any{}}},
		{"CAST(NULL AS Nullable(Int64))", "Nullable(Int64)", nil},
		{"CAST(7 AS Nullable(Int64))", "Nullable(Int64)", int64(7)},
		{"CAST(NULL AS Nullable(String))", "Nullable(String)", nil},
		{"CAST(NULL AS Nullable(Float64))", "Nullable(Float64)", nil},
		{"true", "Bool", true},
		{"false", "Bool", false},
		{"toDateTime64('2024-01-02 03:04:05.123456', 6, 'UTC')", "DateTime64(6, 'UTC')", int64(1704164645123456)},
		{"toDateTime64('1969-12-31 23:59:59.999999', 6, 'UTC')", "DateTime64(6, 'UTC')", int64(-1)},
		{"toDateTime64('2024-01-02 03:04:05.123', 3, 'UTC')", "DateTime64(3, 'UTC')", int64(1704164645123)},
		{"toDateTime('2024-01-01 00:00:00', 'UTC')", "DateTime", int64(1704067200)},
		{"toDate('2024-01-02')", "Date", int64(19724)},
		{"toDate32('1900-01-01')", "Date32", int64(-25567)},
		{"toUUID('61f0c404-5cb3-11e7-907b-a6006ad3dba0')", "UUID", "61f0c404-5cb3-11e7-907b-a6006ad3dba0"},
		{"CAST('b' AS Enum8('a' = 1, 'b' = 2))", "Enum8('a' = 1, 'b' = 2)", "b"},
		{"toLowCardinality('lc')", "LowCardinality(String)", "lc"},
	}
	for _, tc := range cases {
		res := query(t, c, "SELECT "+tc.expr+" AS v")
		if len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
			t.Errorf("%s: rows %v", tc.expr, res.Rows)
			continue
		}
		if len(res.Types) != 1 || res.Types[0] != tc.typ {
			t.Errorf("%s: type %v, want %s", tc.expr, res.Types, tc.typ)
		}
		if got := res.Rows[0][0]; !equal(got, tc.want) {
			t.Errorf("%s: got %#v (%T), want %#v (%T)", tc.expr, got, got, tc.want, tc.want)
		}
	}
	// Many rows and several blocks keep their order and values.
	res := query(t, c, "SELECT number, toString(number) FROM numbers(200000) SETTINGS max_block_size = 65536")
	if len(res.Rows) != 200000 || res.Rows[199999][0] != uint64(199999) || res.Rows[123][1] != "123" {
		t.Fatalf("numbers(200000): %d rows, last %v", len(res.Rows), res.Rows[len(res.Rows)-1])
	}
}

func testReplacing(t *testing.T, c catalog.Conn) {
	exec(t, c, `CREATE TABLE rows_t (
		destination String, id Int64, v Nullable(String), lsn UInt64, store_id String, pack_id String
	) ENGINE = ReplacingMergeTree(lsn) ORDER BY (destination, id, store_id, pack_id)`)
	exec(t, c, `INSERT INTO rows_t VALUES ('d1', 1, 'a', 10, 's', 'p1'), ('d1', 2, NULL, 10, 's', 'p1')`)
	exec(t, c, `INSERT INTO rows_t VALUES ('d1', 1, 'b', 20, 's', 'p1')`)
	exec(t, c, `INSERT INTO rows_t VALUES ('d1', 1, 'c', 30, 's', 'p2')`)
	res := query(t, c, `SELECT id, v, lsn, pack_id FROM rows_t FINAL ORDER BY id, pack_id`)
	want := [][]any{
		{int64(1), "b", uint64(20), "p1"},
		{int64(1), "c", uint64(30), "p2"},
		{int64(2), nil, uint64(10), "p1"},
	}
	if !reflect.DeepEqual(res.Rows, want) {
		t.Fatalf("FINAL rows %v, want %v", res.Rows, want)
	}
	if !reflect.DeepEqual(res.Columns, []string{"id", "v", "lsn", "pack_id"}) {
		t.Fatalf("columns %v", res.Columns)
	}
	res = query(t, c, `SELECT id, argMax(v, lsn) FROM rows_t GROUP BY id ORDER BY id`)
	if !reflect.DeepEqual(res.Rows, [][]any{{int64(1), "c"}, {int64(2), nil}}) {
		t.Fatalf("argMax rows %v", res.Rows)
	}
}

func testInsertSelect(t *testing.T, c catalog.Conn) {
	exec(t, c, `CREATE TABLE src (k Int64, v String) ENGINE = MergeTree ORDER BY k`)
	exec(t, c, `CREATE TABLE lease (name String, holder String, term Int64) ENGINE = MergeTree ORDER BY name`)
	exec(t, c, `CREATE TABLE dst (k Int64, v String, term Int64) ENGINE = MergeTree ORDER BY k`)
	exec(t, c, `INSERT INTO src SELECT number, toString(number) FROM numbers(10)`)
	exec(t, c, `INSERT INTO lease VALUES ('publisher', 'a', 3)`)
	// The fenced-write shape: rows land only while the subquery holds.
	exec(t, c, `INSERT INTO dst SELECT k, v, 3 FROM src WHERE k < 5 AND (SELECT count() FROM lease WHERE name = 'publisher' AND holder = 'a' AND term = 3) = 1`)
	exec(t, c, `INSERT INTO dst SELECT k, v, 4 FROM src WHERE (SELECT count() FROM lease WHERE name = 'publisher' AND holder = 'b') = 1`)
	res := query(t, c, `SELECT count(), sum(k), max(term) FROM dst`)
	if !reflect.DeepEqual(res.Rows, [][]any{{uint64(5), int64(10), int64(3)}}) {
		t.Fatalf("dst %v", res.Rows)
	}
}

func testEmpty(t *testing.T, c catalog.Conn) {
	// Tuples, empty and not (the catalog's argMax(tuple(...)) read shape).
	q := "SELECT number AS k, argMax(tuple(toNullable('x'), ['a']), 1) AS w FROM numbers(3) WHERE number > %d GROUP BY number ORDER BY k"
	res0 := query(t, c, fmt.Sprintf(q, 5))
	if len(res0.Rows) != 0 || !reflect.DeepEqual(res0.Columns, []string{"k", "w"}) || !reflect.DeepEqual(res0.Types, []string{"UInt64", "Tuple(Nullable(String), Array(String))"}) {
		t.Fatalf("empty tuple result: %+v", res0)
	}
	res1 := query(t, c, fmt.Sprintf(q, 1))
	if !reflect.DeepEqual(res1.Rows, [][]any{{uint64(2), []any{"x", []any{"a"}}}}) {
		t.Fatalf("tuple result: %#v", res1.Rows)
	}
	res := query(t, c, "SELECT toInt64(number) AS n, 'x' AS s FROM numbers(10) WHERE number > 100")
	if len(res.Rows) != 0 || !reflect.DeepEqual(res.Columns, []string{"n", "s"}) || !reflect.DeepEqual(res.Types, []string{"Int64", "String"}) {
		t.Fatalf("empty result: %+v", res)
	}
}

func testErrors(t *testing.T, c catalog.Conn) {
	_, err := c.Query(context.Background(), "SELECT * FROM no_such_table")
	var ex *catalog.Exception
	if !errors.As(err, &ex) || ex.Code != 60 {
		t.Fatalf("unknown table: %v, want *catalog.Exception code 60", err)
	}
	if err := c.Exec(context.Background(), "SELEC 1"); !errors.As(err, &ex) || ex.Code != 62 {
		t.Fatalf("syntax error: %v, want code 62", err)
	}
	// The connection still works after errors.
	if res := query(t, c, "SELECT 1 AS one"); res.Rows[0][0] != uint64(1) {
		t.Fatalf("after errors: %v", res.Rows)
	}
}

func testConcurrent(t *testing.T, c catalog.Conn) {
	exec(t, c, `CREATE TABLE conc (g Int64, i Int64) ENGINE = MergeTree ORDER BY (g, i)`)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := 0; i < 10; i++ {
				if err := c.Exec(ctx, fmt.Sprintf("INSERT INTO conc VALUES (%d, %d)", g, i)); err != nil {
					errs <- err
					return
				}
				res, err := c.Query(ctx, fmt.Sprintf("SELECT count() FROM conc WHERE g = %d", g))
				if err != nil {
					errs <- err
					return
				}
				if got := res.Rows[0][0]; got != uint64(i+1) {
					errs <- fmt.Errorf("goroutine %d: count %v after %d inserts", g, got, i+1)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if res := query(t, c, "SELECT count() FROM conc"); res.Rows[0][0] != uint64(80) {
		t.Fatalf("total %v", res.Rows)
	}
}

// testArrowFile reads an Arrow IPC file written by arrow-go with zstd
// compression through file(..., 'Arrow') — the indexing path.
func testArrowFile(t *testing.T, c catalog.Conn) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "amount", Type: &arrow.Decimal128Type{Precision: 38, Scale: 10}, Nullable: true},
		{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String)},
		{Name: "lsn", Type: arrow.PrimitiveTypes.Uint64},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2}, nil)
	b.Field(1).(*array.StringBuilder).AppendValues([]string{"ünï", ""}, nil)
	b.Field(2).(*array.Decimal128Builder).Append(decimal128.FromI64(15000000000))
	b.Field(2).AppendNull()
	b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(1704164645123456))
	b.Field(3).AppendNull()
	lb := b.Field(4).(*array.ListBuilder)
	lb.Append(true)
	lb.ValueBuilder().(*array.StringBuilder).Append("a")
	lb.ValueBuilder().AppendNull()
	lb.Append(true)
	b.Field(5).(*array.Uint64Builder).AppendValues([]uint64{math.MaxUint64, 0}, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()

	path := filepath.Join(t.TempDir(), "pack.arrow")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(schema), ipc.WithAllocator(mem), ipc.WithZstd())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	res := query(t, c, fmt.Sprintf("SELECT id, name, amount, toUnixTimestamp64Micro(at), tags, lsn FROM file('%s', 'Arrow') ORDER BY id", path))
	wantTypes := []string{"Int64", "String", "Nullable(Decimal(38, 10))", "Nullable(Int64)", "Array(Nullable(String))", "UInt64"}
	if !reflect.DeepEqual(res.Types, wantTypes) {
		t.Errorf("arrow file types %v, want %v", res.Types, wantTypes)
	}
	want := [][]any{
		{int64(1), "ünï", "1.5", int64(1704164645123456), []any{"a", nil}, uint64(math.MaxUint64)},
		{int64(2), "", nil, nil, []any{}, uint64(0)},
	}
	if !reflect.DeepEqual(res.Rows, want) {
		t.Fatalf("arrow file rows\n got %#v\nwant %#v", res.Rows, want)
	}
	// The indexing shape: INSERT ... SELECT straight from the pack.
	exec(t, c, `CREATE TABLE packrows (id Int64, name String, lsn UInt64) ENGINE = MergeTree ORDER BY id`)
	exec(t, c, fmt.Sprintf("INSERT INTO packrows SELECT id, name, lsn FROM file('%s', 'Arrow')", path))
	if res := query(t, c, "SELECT count() FROM packrows"); res.Rows[0][0] != uint64(2) {
		t.Fatalf("packrows %v", res.Rows)
	}
}

// TestChDBRefusesNUL: a NUL byte would truncate the statement at the C
// boundary; the chDB backend refuses it instead.
func TestChDBRefusesNUL(t *testing.T) {
	c := chtest.Conn(t)
	_, err := c.Query(context.Background(), "SELECT 'a\x00b'")
	var ex *catalog.Exception
	if !errors.As(err, &ex) || ex.Code != 62 {
		t.Fatalf("NUL in query: %v", err)
	}
}
