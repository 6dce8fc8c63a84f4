package delivery

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
)

// CoreTraceEnv names a directory: when set, each Manager writes its cores'
// event/answer log there as <holder id>.jsonl, for trace conformance
// (`go run ./services/flusher/cmd/model -conform FILE...`). For tests and
// soak runs only: each record is one write(2) made under Manager.mu.
const CoreTraceEnv = "SLUICE_FLUSHER_CORE_TRACE"

// coreTrace appends core records to a file, one JSON line per write, so a
// process killed mid-run leaves at most its last line cut short.
type coreTrace struct {
	mu  sync.Mutex
	f   *os.File
	buf []byte
	err error
}

func openCoreTrace(dir, id string) (*coreTrace, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating core trace directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, id+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening core trace: %w", err)
	}
	return &coreTrace{f: f}, nil
}

func (t *coreTrace) record(r core.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return
	}
	b, err := json.Marshal(r)
	if err == nil {
		t.buf = append(append(t.buf[:0], b...), '\n')
		_, err = t.f.Write(t.buf)
	}
	t.err = err
}

func (t *coreTrace) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.f.Close(); err != nil && t.err == nil {
		t.err = err
	}
	return t.err
}
