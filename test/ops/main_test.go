package ops

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sluice-cdc/sluice/shared/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// repo is the repository root.
func repo(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.work")); err != nil {
		t.Fatalf("repository root not found at %s: %v", dir, err)
	}
	return dir
}

func read(t testing.TB, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{repo(t)}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cacheBin is ~/.cache/sluice/bin/<name> (or under XDG_CACHE_HOME).
func cacheBin(name string) string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "sluice", "bin", name)
}

// tool finds an executable on PATH or in the sluice cache.
func tool(name string) (string, bool) {
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	if p := cacheBin(name); isExec(p) {
		return p, true
	}
	return "", false
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// pipelineServices are the five services, each with its own image.
var pipelineServices = []string{"reader", "router", "flusher", "indexer", "publisher"}
