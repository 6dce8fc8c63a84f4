package kit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
)

var (
	sluiceOnce sync.Once
	sluicePath string
	sluiceErr  error
	tmpDirs    []string
)

// SluiceBin builds the sluice binary once per test binary (or returns
// $SLUICE_BIN) and returns its path.
func SluiceBin() (string, error) {
	sluiceOnce.Do(func() {
		if p := os.Getenv("SLUICE_BIN"); p != "" {
			sluicePath = p
			return
		}
		dir, err := os.MkdirTemp("", "sluice-kit-bin-")
		if err != nil {
			sluiceErr = err
			return
		}
		tmpDirs = append(tmpDirs, dir)
		sluicePath = filepath.Join(dir, "sluice")
		out, err := exec.Command("go", "build", "-tags="+buildTags(), "-o", sluicePath, "github.com/sluice-cdc/sluice/services/sluice").CombinedOutput()
		if err != nil {
			sluiceErr = fmt.Errorf("building sluice: %v\n%s", err, out)
		}
	})
	return sluicePath, sluiceErr
}

// Cleanup removes what the kit built; call it from TestMain.
func Cleanup() {
	for _, d := range tmpDirs {
		os.RemoveAll(d)
	}
}

// CacheDir is ~/.cache/sluice/bin, where tool binaries are kept.
func CacheDir() string {
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "sluice", "bin")
}

// buildTags are the build tags of the running test binary (sluice_unsafe
// for the negative controls): the sluice binary is built with the same.
func buildTags() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-tags" {
				return s.Value
			}
		}
	}
	return ""
}

func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "v2.15.3"
}

var (
	natsOnce sync.Once
	natsPath string
	natsErr  error
)

// NATSServerBin returns a real nats-server binary, building it from the
// module the test module requires the first time on this machine.
func NATSServerBin() (string, error) {
	natsOnce.Do(func() {
		if p := os.Getenv("SLUICE_NATS_SERVER_BIN"); p != "" {
			natsPath = p
			return
		}
		v := moduleVersion("github.com/nats-io/nats-server/v2")
		natsPath = filepath.Join(CacheDir(), "nats-server-"+v)
		if _, err := os.Stat(natsPath); err == nil {
			return
		}
		if err := os.MkdirAll(CacheDir(), 0o755); err != nil {
			natsErr = err
			return
		}
		tmp := natsPath + ".tmp"
		cmd := exec.Command("go", "build", "-o", tmp, "github.com/nats-io/nats-server/v2")
		cmd.Dir = moduleDir()
		if out, err := cmd.CombinedOutput(); err != nil {
			natsErr = fmt.Errorf("building nats-server: %v\n%s", err, out)
			return
		}
		natsErr = os.Rename(tmp, natsPath)
	})
	return natsPath, natsErr
}

// JaegerBin returns the cached Jaeger v2 binary, or "" when it is absent.
func JaegerBin() string {
	if p := os.Getenv("SLUICE_JAEGER_BIN"); p != "" {
		return p
	}
	m, _ := filepath.Glob(filepath.Join(CacheDir(), "jaeger-*"))
	for _, p := range m {
		if !strings.HasSuffix(p, ".tmp") {
			return p
		}
	}
	return ""
}

// moduleDir is the test module's directory (for go build).
func moduleDir() string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/sluice-cdc/sluice/test").Output()
	if err != nil {
		return "."
	}
	return strings.TrimSpace(string(out))
}
