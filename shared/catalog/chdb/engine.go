package chdb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"
)

// engine is the process-wide chDB engine: libchdb runs one ClickHouse
// instance per process, bound to one data directory. Every Conn handle on the
// same directory shares it; the last Close shuts it down.
//
// NOTES (measured on this machine, 2 cores, libchdb 26.5.3):
//   - libchdb executes one statement at a time per process: 4 goroutines each
//     running SELECT sleep(0.1) five times took 2.1 s (serial), and a Go
//     mutex around every call changed no throughput figure (SELECT 1: about
//     0.5 ms with 1 or 8 goroutines; a 3M-row sum: about 2.3 ms either way).
//     So the engine serializes calls itself (turns, which also lets the
//     pipeline's statements go before reads) — which also makes the
//     session's current database safe to switch per call.
//   - Starting the engine (chdb_connect) installs handlers for SIGSEGV, SIGBUS,
//     SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS, SIGTSTP and signal 34; dlopen
//     installs none; SIGINT/SIGTERM are left alone. See signals_linux.go.
//   - dlopen of the 559 MB library takes about 0.4 s, chdb_connect about 0.25 s.
type engine struct {
	dir  string
	conn *chdbConnection
	refs int // guarded by engineMu

	// turn serializes calls into libchdb (waiting honours ctx; reads marked
	// Behind go after the pipeline's statements). Lock order: engineMu
	// before turn.
	turn   turns
	curDB  string // the session's current database; guarded by turn
	closed bool   // guarded by turn
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
	if err := os.MkdirAll(abs, 0o700); err != nil {
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
	current = &engine{dir: abs, conn: conn, refs: 1, curDB: "default"}
	return current, nil
}

func (e *engine) release() {
	engineMu.Lock()
	defer engineMu.Unlock()
	e.refs--
	if e.refs > 0 {
		return
	}
	_ = e.turn.acquire(context.Background())
	e.closed = true
	lib.closeConn(e.conn)
	e.turn.release()
	restoreGoSignalHandlers()
	if current == e {
		current = nil
	}
}

// exec runs query with the session's current database set to db ("" means
// default), waiting for the engine in turn.
func (e *engine) exec(ctx context.Context, db, query, format string) ([]byte, error) {
	if err := e.turn.acquire(ctx); err != nil {
		return nil, err
	}
	defer e.turn.release()
	if e.closed {
		return nil, ErrClosed
	}
	if db == "" {
		db = "default"
	}
	if db != e.curDB {
		// One call, two statements: the engine runs them back to back.
		out, err := e.run("USE "+quoteIdent(db)+"; "+query, format)
		e.curDB = db
		if err != nil {
			e.curDB = "" // unknown whether the USE ran: switch next time
		}
		return out, err
	}
	return e.run(query, format)
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
