package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/batch"
	"github.com/sluice-cdc/sluice/services/reader/internal/pgoutput"
	"github.com/sluice-cdc/sluice/shared/pgtypes"
)

// Reads are the queries the stream makes of the source while it decodes:
// column types, unchanged TOAST values, generated
// columns, column attnums and defaults. Pool is a normal connection pool
// with the session settings pgtypes.AppendText reads.
type Reads struct {
	Pool  *pgxpool.Pool
	Types *pgtypes.Resolver
	// FetchWaits counts the retries of a TOAST read whose snapshot did not
	// see the change's transaction yet (Fetch).
	FetchWaits prometheus.Counter
	Log        *slog.Logger
	// NoFetchWaitForTest takes a TOAST read's first snapshot as is (a
	// test's negative control).
	NoFetchWaitForTest bool
}

// NewReads returns the stream's reads of pool.
func NewReads(pool *pgxpool.Pool, waits prometheus.Counter, log *slog.Logger) *Reads {
	return &Reads{Pool: pool, Types: pgtypes.NewResolver(pool), FetchWaits: waits, Log: log}
}

// Resolve gives the kind and Postgres type name of relation relid's column
// c, and for a proto.KindToJSONB column the conversion of its text form to
// JSON.
func (s *Reads) Resolve(ctx context.Context, relid uint32, c pgoutput.Column) (proto.Kind, string, batch.JSONFunc, error) {
	// The type the Relation message names (historic on a replay),
	// then the catalog only to tell a multi-dimensional array column.
	kind, pgType, err := s.Types.Resolve(ctx, c.TypeOID, c.TypMod)
	if err != nil {
		return "", "", nil, err
	}
	if _, isArray := kind.Elem(); isArray {
		if k, _, err := pgtypes.ResolveColumn(ctx, s.Pool, relid, c.Name); err == nil && k == proto.KindToJSONB {
			kind = proto.KindToJSONB
		}
	}
	if kind != proto.KindToJSONB {
		return kind, pgType, nil, nil
	}
	// Composites, hstore, multi-dimensional arrays and arrays that
	// are not lists of a kind: converted to to_jsonb's JSON by the
	// type's shape (any dimensions: the array text says how many).
	shape, err := s.Types.Shape(ctx, c.TypeOID)
	if err != nil {
		return "", "", nil, err
	}
	return kind, pgType, shape.AppendJSON, nil
}

// DescribeGenerated lists relation relid's stored generated columns.
func (s *Reads) DescribeGenerated(ctx context.Context, relid uint32) ([]Generated, error) {
	return DescribeGenerated(ctx, s.Pool, relid)
}

// ColumnNums reads relation relid's live columns' attnums, by name.
func (s *Reads) ColumnNums(ctx context.Context, relid uint32) (map[string]int16, error) {
	return ColumnNums(ctx, s.Pool, relid)
}

// HasDefault reports whether column of relation relid has a value in the
// rows it existed before.
func (s *Reads) HasDefault(ctx context.Context, relid uint32, column string) (bool, error) {
	return HasDefault(ctx, s.Pool, relid, column)
}

// Fetch reads the text form of cols of one source row by its key (the
// key's text forms, cast to the key columns' types so the primary key index
// serves the lookup), from a snapshot in which transaction xid is visible.
// The change being decoded has committed, but a commit reaches the
// replication stream as soon as its WAL is flushed, a moment before the
// committing backend leaves the proc array: a read in that moment misses the
// moved row (or sees an older incarnation of its key) and its TOAST value
// would become NULL in the destination (rule 6). So the snapshot is read
// with the row, and the read is retried until the snapshot sees xid. With
// NoFetchWaitForTest the first read is taken as is.
// Identifiers come from the validated config and the source catalog and are
// quoted.
func (s *Reads) Fetch(ctx context.Context, table string, xid uint32, keyCols, keyTypes []string, keyVals [][]byte, cols []string) ([][]byte, bool, error) {
	schema, name, _ := strings.Cut(table, ".")
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = pgx.Identifier{"_sluice_row", c}.Sanitize() + "::text"
	}
	on := make([]string, len(keyCols))
	args := make([]any, len(keyCols))
	for i, k := range keyCols {
		on[i] = fmt.Sprintf("%s = $%d::text::%s", pgx.Identifier{"_sluice_row", k}.Sanitize(), i+1, keyTypes[i])
		args[i] = string(keyVals[i])
	}
	// One row always: the statement's snapshot, whether the key was found,
	// the values.
	q := "SELECT pg_current_snapshot()::text, _sluice_row.ctid IS NOT NULL, " + strings.Join(sel, ", ") +
		" FROM (VALUES (1)) AS _sluice_one (x) LEFT JOIN " + pgx.Identifier{schema, name}.Sanitize() + " AS _sluice_row ON " + strings.Join(on, " AND ") +
		" LIMIT 1"
	started := time.Now()
	warned := false
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		vals, found, snap, err := fetchOnce(ctx, s.Pool, q, args, len(cols))
		if err != nil {
			return nil, false, err
		}
		ok, err := XidVisible(snap, xid)
		if err != nil {
			return nil, false, err
		}
		if ok || s.NoFetchWaitForTest {
			return vals, found, nil
		}
		s.FetchWaits.Inc()
		if !warned && time.Since(started) > 5*time.Second {
			warned = true
			s.Log.Warn("waiting for a committed transaction to become visible to read a moved row's unchanged TOAST values (a synchronous standby that does not answer holds commits invisible)",
				"table", table, "xid", xid, "snapshot", snap)
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false, ctx.Err()
		case <-t.C:
		}
	}
}

func fetchOnce(ctx context.Context, q Querier, sql string, args []any, ncols int) (out [][]byte, found bool, snap string, err error) {
	vals := make([]*string, ncols)
	ptrs := make([]any, ncols+2)
	ptrs[0], ptrs[1] = &snap, &found
	for i := range vals {
		ptrs[i+2] = &vals[i]
	}
	if err := q.QueryRow(ctx, sql, args...).Scan(ptrs...); err != nil {
		return nil, false, "", err
	}
	if !found {
		return nil, false, snap, nil
	}
	out = make([][]byte, ncols)
	for i, v := range vals {
		if v != nil {
			out[i] = []byte(*v)
		}
	}
	return out, true, snap, nil
}

// Eval runs a generated-column statement (GeneratedSQL) on one row's text
// values and returns its text results (nil: NULL).
func (s *Reads) Eval(ctx context.Context, sql string, args [][]byte) ([][]byte, error) {
	params := make([]any, len(args))
	for i, a := range args {
		if a != nil {
			params[i] = string(a)
		}
	}
	rows, err := s.Pool.Query(ctx, sql, params...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("no row")
	}
	raw := rows.RawValues()
	out := make([][]byte, len(raw))
	for i, v := range raw {
		if v != nil {
			out[i] = slices.Clone(v)
		}
	}
	rows.Close()
	return out, rows.Err()
}

// XidVisible reports whether a committed transaction with 32-bit id xid is
// visible in snapshot snap (pg_snapshot's text form, xmin:xmax:xip,...):
// its full id, the one nearest xmax, is below xmax and not in progress.
func XidVisible(snap string, xid uint32) (bool, error) {
	parts := strings.Split(snap, ":")
	if len(parts) != 3 {
		return false, fmt.Errorf("parsing snapshot %q: want xmin:xmax:xip", snap)
	}
	xmax, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return false, fmt.Errorf("parsing snapshot %q: %w", snap, err)
	}
	full := xmax + int64(int32(xid-uint32(xmax)))
	if full >= xmax {
		return false, nil
	}
	if parts[2] == "" {
		return true, nil
	}
	for _, x := range strings.Split(parts[2], ",") {
		if v, err := strconv.ParseInt(x, 10, 64); err == nil && v == full {
			return false, nil
		}
	}
	return true, nil
}
