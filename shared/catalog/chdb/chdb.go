package chdb

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
)

// Conn is a connection to the embedded ClickHouse engine (chDB, libchdb.so
// loaded in-process through purego). Handles are cheap; every handle of a
// process shares the one engine (libchdb runs one per process), which
// executes one statement at a time — the engine serializes internally, so
// the handle serializes too (measured: no throughput lost, see NOTES in
// engine.go) and can therefore switch the session's current database
// safely for handles bound to a database (Database).
type Conn struct {
	eng      *engine
	database string // "" = the engine's default database
	owner    bool   // Close releases the engine reference
	closed   atomic.Bool
}

// Open starts (or joins) the process's chDB engine with its data under
// dir. A second Open on the same dir shares the engine; on another dir it
// fails with ErrEngineInUse.
func Open(dir string) (*Conn, error) {
	eng, err := acquireEngine(dir)
	if err != nil {
		return nil, err
	}
	return &Conn{eng: eng, owner: true}, nil
}

// Dir is the engine's data directory.
func (c *Conn) Dir() string { return c.eng.dir }

// Database returns a handle on the same engine whose unqualified table names
// resolve in database db (which must exist). Closing it does not close c.
func (c *Conn) Database(db string) *Conn {
	return &Conn{eng: c.eng, database: db}
}

// Exec runs a statement that returns no rows.
func (c *Conn) Exec(ctx context.Context, query string) error {
	if _, err := c.QueryRaw(ctx, query, "Null"); err != nil {
		return err
	}
	return nil
}

// Query runs a statement and returns its normalized rows. It reads the
// engine's Native output with clickhouse-go's codecs, the same decoding the
// server backend uses.
func (c *Conn) Query(ctx context.Context, query string) (*Result, error) {
	out, err := c.QueryRaw(ctx, query, "Native")
	if err != nil {
		return nil, err
	}
	res, err := decodeNative(out)
	if err != nil {
		return nil, fmt.Errorf("reading result of %s: %w", abbrev(query), err)
	}
	if len(res.Columns) == 0 && IsSelect(query) {
		// The engine writes nothing for an empty result; a server names the
		// columns anyway. Ask for them so both backends agree.
		if names, types, err := c.Header(ctx, query); err == nil {
			res.Columns, res.Types = names, types
		}
	}
	return res, nil
}

// Header returns the column names and types a SELECT would produce, without
// running it (DESCRIBE TABLE (query)).
func (c *Conn) Header(ctx context.Context, query string) (names, types []string, err error) {
	q := strings.TrimRight(strings.TrimSpace(query), ";")
	out, err := c.QueryRaw(ctx, "DESCRIBE TABLE ("+q+"\n)", "Native")
	if err != nil {
		return nil, nil, err
	}
	d, err := decodeNative(out)
	if err != nil {
		return nil, nil, fmt.Errorf("reading header of %s: %w", abbrev(query), err)
	}
	for _, r := range d.Rows {
		if len(r) < 2 {
			continue
		}
		n, _ := r[0].(string)
		t, _ := r[1].(string)
		names, types = append(names, n), append(types, t)
	}
	return names, types, nil
}

// IsSelect reports whether a statement is a query that returns rows
// (SELECT, WITH ..., or a parenthesised SELECT), skipping leading comments.
func IsSelect(query string) bool {
	s := query
	for {
		s = strings.TrimLeft(s, " \t\r\n(")
		switch {
		case strings.HasPrefix(s, "--"):
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				s = s[i+1:]
				continue
			}
			return false
		case strings.HasPrefix(s, "/*"):
			if i := strings.Index(s, "*/"); i >= 0 {
				s = s[i+2:]
				continue
			}
			return false
		}
		break
	}
	w := strings.ToUpper(s[:min(len(s), 7)])
	return strings.HasPrefix(w, "SELECT") || strings.HasPrefix(w, "WITH")
}

// QueryRaw runs a statement and returns its output in the given ClickHouse
// output format (Native, JSONEachRow, ArrowStream, ...). Engine errors are
// *Exception.
func (c *Conn) QueryRaw(ctx context.Context, query, format string) ([]byte, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if strings.IndexByte(query, 0) >= 0 {
		// The C API takes a NUL-terminated string: refuse rather than run a
		// silently truncated statement.
		return nil, &Exception{Code: 62, Message: "Code: 62. query contains a NUL byte; write binary values as escapes ('\\x00') in the SQL"}
	}
	return c.eng.exec(ctx, c.database, query, format)
}

// Close releases this handle; the engine stops when its last owner closes.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.owner {
		c.eng.release()
	}
	return nil
}

// quoteIdent quotes a ClickHouse identifier with backquotes.
func quoteIdent(s string) string {
	return "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`").Replace(s) + "`"
}

func abbrev(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 80 {
		return q[:77] + "..."
	}
	return q
}
