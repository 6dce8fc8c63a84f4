package chdb

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"time"

	chproto "github.com/ClickHouse/ch-go/proto"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"
)

// Result is a query's rows. Values are normalized across backends:
// NULL -> nil; every signed integer -> int64; every unsigned -> uint64;
// Float32/Float64 -> float64 (NaN and ±Inf kept); String, FixedString, UUID,
// Decimal, Enum -> string; Bool -> bool; Array(T) -> []any of normalized
// elements; DateTime/DateTime64/Date/Date32 -> int64 (seconds, ticks of the
// column's precision, days — the catalog stores times as integers anyway).
type Result struct {
	Columns []string
	Types   []string // ClickHouse type names, e.g. Nullable(Int64)
	Rows    [][]any
}

// Both backends decode ClickHouse's Native format with clickhouse-go's column
// codecs — chDB's output here, a server's inside clickhouse-go — and pass the
// resulting Go values through Normalize, so a value reads the same on every
// backend by construction.

// decodeNative decodes a Native-format byte stream (revision 0, as
// `FORMAT Native` writes it) into a Result.
func decodeNative(data []byte) (*Result, error) {
	res := &Result{}
	if len(data) == 0 {
		return res, nil
	}
	r := chproto.NewReader(bytes.NewReader(data))
	sc := &column.ServerContext{Timezone: time.UTC}
	first := true
	for {
		block := proto.Block{ServerContext: sc}
		if err := block.Decode(r, 0); err != nil {
			if errors.Is(err, io.EOF) {
				return res, nil
			}
			return nil, fmt.Errorf("decoding native block: %w", err)
		}
		if first {
			for _, c := range block.Columns {
				res.Columns = append(res.Columns, c.Name())
				res.Types = append(res.Types, string(c.Type()))
			}
			first = false
		}
		n := block.Rows()
		for i := 0; i < n; i++ {
			row := make([]any, len(block.Columns))
			for j, c := range block.Columns {
				row[j] = Normalize(c.Row(i, false), res.Types[j])
			}
			res.Rows = append(res.Rows, row)
		}
	}
}

// baseType strips Nullable(...) and LowCardinality(...) wrappers.
func baseType(t string) string {
	for {
		switch {
		case strings.HasPrefix(t, "Nullable(") && strings.HasSuffix(t, ")"):
			t = t[len("Nullable(") : len(t)-1]
		case strings.HasPrefix(t, "LowCardinality(") && strings.HasSuffix(t, ")"):
			t = t[len("LowCardinality(") : len(t)-1]
		default:
			return t
		}
	}
}

// elemType returns T of Array(T) (after unwrapping), or "".
func elemType(t string) string {
	t = baseType(t)
	if strings.HasPrefix(t, "Array(") && strings.HasSuffix(t, ")") {
		return t[len("Array(") : len(t)-1]
	}
	return ""
}

// dateTime64Precision returns p of DateTime64(p[, tz]).
func dateTime64Precision(t string) int {
	s := strings.TrimPrefix(t, "DateTime64(")
	if i := strings.IndexAny(s, ",)"); i > 0 {
		if p, err := strconv.Atoi(strings.TrimSpace(s[:i])); err == nil {
			return p
		}
	}
	return 3
}

var pow10 = [...]int64{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// timeValue maps a time.Time of ClickHouse type t to the catalog's integer
// form: Date/Date32 -> days since 1970-01-01, DateTime -> seconds,
// DateTime64(p) -> ticks of 10^-p seconds.
func timeValue(v time.Time, t string) int64 {
	bt := baseType(t)
	switch {
	case strings.HasPrefix(bt, "Date32"), bt == "Date":
		d := time.Date(v.Year(), v.Month(), v.Day(), 0, 0, 0, 0, time.UTC)
		return floorDiv(d.Unix(), 86400)
	case strings.HasPrefix(bt, "DateTime64"):
		p := dateTime64Precision(bt)
		if p < 0 || p > 9 {
			p = 9
		}
		return v.Unix()*pow10[p] + int64(v.Nanosecond())/pow10[9-p]
	default:
		return v.Unix()
	}
}

// Normalize maps a clickhouse-go value of ClickHouse type t to the
// normalized form documented on Result. The server backend (package catalog)
// passes its scanned values through it too.
func Normalize(v any, t string) any {
	switch x := v.(type) {
	case nil:
		return nil
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case int:
		return int64(x)
	case uint8:
		if baseType(t) == "Bool" {
			return x != 0
		}
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uint64:
		return x
	case float32:
		return float64(x)
	case float64:
		return x
	case bool:
		return x
	case string:
		return x
	case []byte:
		if et := elemType(t); et != "" {
			out := make([]any, len(x)) // Array(UInt8), not a string
			for i, b := range x {
				out[i] = uint64(b)
			}
			return out
		}
		return string(x)
	case time.Time:
		return timeValue(x, t)
	case decimal.Decimal:
		return x.String()
	case uuid.UUID:
		return x.String()
	case big.Int:
		return x.String()
	case *big.Int:
		if x == nil {
			return nil
		}
		return x.String()
	case netip.Addr:
		return x.String()
	case net.IP:
		return x.String()
	case fmt.Stringer:
		if reflect.ValueOf(v).Kind() != reflect.Pointer && reflect.ValueOf(v).Kind() != reflect.Slice {
			return x.String()
		}
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil
		}
		return Normalize(rv.Elem().Interface(), t)
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() && elemType(t) == "" {
			return nil
		}
		et := elemType(t)
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = Normalize(rv.Index(i).Interface(), et)
		}
		return out
	case reflect.Map:
		out := make(map[string]any, rv.Len())
		iter := rv.MapRange()
		for iter.Next() {
			out[fmt.Sprint(Normalize(iter.Key().Interface(), ""))] = Normalize(iter.Value().Interface(), "")
		}
		return out
	}
	return fmt.Sprint(v)
}
