package catalog

import "context"

// Conn is one connection to the ClickHouse engine: the embedded chDB engine
// or a ClickHouse server. Every catalog statement is plain SQL that both
// backends run unchanged.
type Conn interface {
	// Exec runs a statement that returns no rows (DDL, INSERT ... SELECT).
	Exec(ctx context.Context, query string) error
	// Query runs a SELECT and returns its rows with values normalized the same
	// way on every backend (see Result).
	Query(ctx context.Context, query string) (*Result, error)
	// Close releases the connection.
	Close() error
}

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
