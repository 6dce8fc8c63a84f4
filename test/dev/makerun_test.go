package dev

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/test/kit"
)

// jaegerPorts are the ports of make run's Jaeger (deploy/jaeger-local.yaml).
var jaegerPorts = []int{4317, 4318, 16686, 16685, 13133}

// listeners returns the local addresses (hex, as /proc/net/tcp{,6} write
// them) listening on port.
func listeners(t *testing.T, port int) []string {
	t.Helper()
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 4 || fs[3] != "0A" { // LISTEN
				continue
			}
			addr, p, ok := strings.Cut(fs[1], ":")
			if n, err := strconv.ParseUint(p, 16, 32); ok && err == nil && int(n) == port {
				out = append(out, addr)
			}
		}
		fh.Close()
	}
	return out
}

// TestMakeRunTraces runs what `make run` runs (deploy/run-dev.sh) with the
// cached Jaeger binary, as a person at a terminal would: Jaeger starts on
// loopback ports only, sluice dev exports to it and its UI's trace route
// shows a pack's trace with all five services; Ctrl-C (SIGINT to the
// process group) drains sluice, exits 0 and stops Jaeger.
func TestMakeRunTraces(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sluice dev and Jaeger")
	}
	jbin := kit.JaegerBin()
	if jbin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no Jaeger v2 binary in ~/.cache/sluice/bin: make test fetches it (make jaeger); CI must run this test")
		}
		t.Skip("no Jaeger v2 binary in ~/.cache/sluice/bin: run make jaeger")
	}
	for _, p := range jaegerPorts {
		if l := listeners(t, p); len(l) > 0 {
			t.Skipf("port %d, one of make run's Jaeger ports, is taken here (a make run or a compose Jaeger): %v", p, l)
		}
	}
	bin, err := kit.SluiceBin()
	if err != nil {
		t.Fatal(err)
	}
	// The cache deploy/fetch-jaeger.sh --path looks in, holding the binary.
	cache := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cache, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(jbin, filepath.Join(cache, "bin", "jaeger-v1.75.0")); err != nil {
		t.Fatal(err)
	}
	path, dir, ports := demoConfig(t, 4, "1s")
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "deploy/run-dev.sh", path)
	cmd.Dir = repo
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SLUICE_") && !strings.HasPrefix(e, "JAEGER") && !strings.HasPrefix(e, "OTEL_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "SLUICE_BIN="+bin, "SLUICE_CACHE="+cache, "TMPDIR="+dir)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's process group
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("make run printed:\n%s", tail(out.String(), 6000))
		}
	}()

	server := fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	eventually(t, 2*time.Minute, "make run says Jaeger records traces", func() error {
		if !strings.Contains(out.String(), "make run: Jaeger jaeger-v1.75.0 records traces") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	for _, p := range jaegerPorts {
		for _, a := range listeners(t, p) {
			if a != "0100007F" { // 127.0.0.1
				t.Errorf("Jaeger listens on port %d beyond loopback (address %s)", p, a)
			}
		}
	}
	var trace string
	eventually(t, 3*time.Minute, "a pack's trace with all five services through the UI's trace route", func() error {
		var d struct {
			Destinations []struct {
				Destination string `json:"destination"`
			} `json:"destinations"`
		}
		if err := getJSON(server+"/api/v1/destinations?limit=10", &d); err != nil {
			return err
		}
		for _, x := range d.Destinations {
			var p struct {
				Packs []struct {
					Trace string `json:"traceparent"`
				} `json:"packs"`
			}
			if err := getJSON(server+"/api/v1/packs?limit=3&destination="+url.QueryEscape(x.Destination), &p); err != nil {
				continue
			}
			for _, k := range p.Packs {
				f := strings.Split(k.Trace, "-")
				if len(f) != 4 {
					continue
				}
				var v struct {
					Services []string `json:"services"`
				}
				if getJSON(server+"/api/v1/traces/"+f[1], &v) == nil &&
					slices.Equal(v.Services, []string{"reader", "router", "flusher", "indexer", "publisher"}) {
					trace = f[1]
					return nil
				}
			}
		}
		return fmt.Errorf("no pack's trace covers the five services yet")
	})
	t.Logf("%.0fs from make run's start to trace %s with all five services", time.Since(start).Seconds(), trace)

	// Ctrl-C: the terminal signals the whole foreground process group.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("make run after Ctrl-C: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("make run did not end within 2 minutes of Ctrl-C")
	}
	if !strings.Contains(out.String(), "sluice stopped") {
		t.Errorf("sluice did not drain and stop")
	}
	for _, p := range jaegerPorts {
		if l := listeners(t, p); len(l) > 0 {
			t.Errorf("port %d still listens after make run ended: Jaeger was not stopped", p)
		}
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:16686", time.Second); err == nil {
		c.Close()
		t.Error("Jaeger's query API still answers after make run ended")
	}
}
