package chdb

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// LibchdbVersion is the libchdb release deploy/fetch-libchdb.sh installs.
const LibchdbVersion = "26.5.3"

// The C ABI of libchdb (chdb.h), the same functions and layouts that
// github.com/chdb-io/chdb-go v1.11.0 (chdb-purego) binds. We bind them here,
// lazily, instead of importing chdb-purego: that package dlopens libchdb in
// its init() — before any code of ours can run, because package init order
// follows import paths and github.com/chdb-io sorts before ours — and panics
// when the library is missing. Importing it would crash every binary and test
// that links shared/catalog, even ones that only talk to a ClickHouse server.
// Here the library is located and loaded on the first embedded Open, and a
// missing library is an ordinary error that names the fix.
type chdbConnection struct{ internal unsafe.Pointer }

type chdbResult struct{ internal unsafe.Pointer }

var lib struct {
	once sync.Once
	path string
	err  error

	connect       func(argc int, argv []*byte) *chdbConnection
	closeConn     func(conn *chdbConnection)
	query         func(conn unsafe.Pointer, query string, format string) *chdbResult
	destroyResult func(res *chdbResult)
	resultBuffer  func(res *chdbResult) *byte
	resultLength  func(res *chdbResult) uint
	resultError   func(res *chdbResult) string
	rowsRead      func(res *chdbResult) uint64
	bytesRead     func(res *chdbResult) uint64
	elapsed       func(res *chdbResult) float64
}

// loadLibchdb finds and loads libchdb.so once per process.
func loadLibchdb() error {
	lib.once.Do(func() {
		path, err := FindLibchdb()
		if err != nil {
			lib.err = err
			return
		}
		lib.path = path
		// chdb-go reads CHDB_LIB_PATH; keep it coherent for anything else in
		// the process (or a child) that looks for the library.
		if os.Getenv("CHDB_LIB_PATH") == "" {
			_ = os.Setenv("CHDB_LIB_PATH", path)
		}
		h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			lib.err = fmt.Errorf("%w: loading %s: %v", ErrLibchdb, path, err)
			return
		}
		for _, f := range []struct {
			fptr any
			name string
		}{
			{&lib.connect, "chdb_connect"},
			{&lib.closeConn, "chdb_close_conn"},
			{&lib.query, "chdb_query"},
			{&lib.destroyResult, "chdb_destroy_query_result"},
			{&lib.resultBuffer, "chdb_result_buffer"},
			{&lib.resultLength, "chdb_result_length"},
			{&lib.resultError, "chdb_result_error"},
			{&lib.rowsRead, "chdb_result_rows_read"},
			{&lib.bytesRead, "chdb_result_bytes_read"},
			{&lib.elapsed, "chdb_result_elapsed"},
		} {
			if _, err := purego.Dlsym(h, f.name); err != nil {
				lib.err = fmt.Errorf("%w: %s has no symbol %s (want libchdb %s): %v", ErrLibchdb, path, f.name, LibchdbVersion, err)
				return
			}
			purego.RegisterLibFunc(f.fptr, h, f.name)
		}
	})
	return lib.err
}

// FindLibchdb returns the path of libchdb.so: $CHDB_LIB_PATH if set; else the
// newest version in the cache deploy/fetch-libchdb.sh fills
// (${XDG_CACHE_HOME:-$HOME/.cache}/sluice/libchdb/<version>/libchdb.so); else
// libchdb.so next to the executable. The error names the fix.
func FindLibchdb() (string, error) {
	if p := os.Getenv("CHDB_LIB_PATH"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: CHDB_LIB_PATH=%s: %v", ErrLibchdb, p, err)
		}
		return p, nil
	}
	var tried []string
	if dir := libchdbCacheDir(); dir != "" {
		if p, ok := newestLibchdb(dir); ok {
			return p, nil
		}
		tried = append(tried, filepath.Join(dir, "<version>", "libchdb.so"))
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "libchdb.so")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	return "", fmt.Errorf("%w: libchdb.so not found (looked at $CHDB_LIB_PATH, %s); run `make build` or deploy/fetch-libchdb.sh to fetch libchdb %s, or set CHDB_LIB_PATH",
		ErrLibchdb, strings.Join(tried, ", "), LibchdbVersion)
}

func libchdbCacheDir() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			return ""
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "sluice", "libchdb")
}

// newestLibchdb picks the highest version directory holding a libchdb.so.
func newestLibchdb(dir string) (string, bool) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", false
	}
	best, bestV := "", []int(nil)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name(), "libchdb.so")
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			continue
		}
		v := parseVersion(e.Name())
		if best == "" || versionLess(bestV, v) {
			best, bestV = p, v
		}
	}
	return best, best != ""
}

func parseVersion(s string) []int {
	var v []int
	for _, part := range strings.Split(s, ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			n = -1
		}
		v = append(v, n)
	}
	return v
}

func versionLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}
