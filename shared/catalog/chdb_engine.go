package catalog

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"
)

// engine is the process-wide chDB engine: libchdb runs one ClickHouse
// instance per process, bound to one data directory. Every ChDB handle on the
// same directory shares it; the last Close shuts it down.
type engine struct {
	dir  string
	conn *chdbConnection
	refs int // guarded by engineMu
}

var (
	engineMu sync.Mutex // guards current and its refs, and open/close
	current  *engine
)

func acquireEngine(dir string) (*engine, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolving catalog directory %s: %w", dir, err)
	}
	if err := loadLibchdb(); err != nil {
		return nil, err
	}
	engineMu.Lock()
	defer engineMu.Unlock()
	if current != nil {
		if current.dir != abs {
			return nil, fmt.Errorf("%w: open on %s, asked for %s", ErrEngineInUse, current.dir, abs)
		}
		current.refs++
		return current, nil
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("creating catalog directory %s: %w", abs, err)
	}
	argv := []string{"clickhouse", "--path=" + abs}
	cargv := make([]*byte, len(argv))
	for i, a := range argv {
		b := append([]byte(a), 0)
		cargv[i] = &b[0]
	}
	conn := lib.connect(len(cargv), cargv)
	restoreGoSignalHandlers()
	if conn == nil || conn.internal == nil {
		return nil, fmt.Errorf("starting chdb engine on %s: chdb_connect failed", abs)
	}
	current = &engine{dir: abs, conn: conn, refs: 1}
	return current, nil
}

func (e *engine) release() {
	engineMu.Lock()
	defer engineMu.Unlock()
	e.refs--
	if e.refs > 0 {
		return
	}
	lib.closeConn(e.conn)
	restoreGoSignalHandlers()
	if current == e {
		current = nil
	}
}

// run executes one statement and returns its output in format (copied into
// Go memory). An engine error comes back as *Exception.
func (e *engine) run(query, format string) ([]byte, error) {
	res := lib.query(e.conn.internal, query, format)
	firstQueryDone()
	if res == nil {
		return nil, nil
	}
	defer lib.destroyResult(res)
	if msg := lib.resultError(res); msg != "" {
		return nil, newException(msg)
	}
	n := lib.resultLength(res)
	if n == 0 {
		return nil, nil
	}
	buf := lib.resultBuffer(res)
	if buf == nil {
		return nil, nil
	}
	out := make([]byte, n)
	copy(out, unsafe.Slice(buf, n))
	return out, nil
}
