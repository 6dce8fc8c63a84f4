package bench

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/test/kit"
)

// counters are the pipeline-wide figures the benchmark reads from every
// process's /metrics (summed) and from the pack store.
type counters struct {
	routedBatches float64 // sluice_router_batches_total{outcome="routed"}
	published     float64 // sluice_router_messages_published_total
	filesWritten  float64 // sluice_flusher_files_written_total, or pack files counted in the store
	filesCounted  bool    // filesWritten counts store files (no metric)
	// cpu is the CPU time (user + system) the pipeline's processes have
	// used, chDB's threads included: unlike wall time it does not depend
	// on what else the machine runs.
	cpu time.Duration
}

// sample reads the counters of p; dir is the pipeline's directory (its pack
// store is under it).
func sample(ctx context.Context, p kit.Pipeline, dir string) counters {
	var c counters
	haveFiles := false
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, proc := range p.Services() {
		c.cpu += cpuTime(proc.Pid())
		base, ok := strings.CutSuffix(proc.Ready, "/healthz")
		if !ok {
			continue
		}
		m, err := scrape(ctx, hc, base+"/metrics")
		if err != nil {
			continue
		}
		c.routedBatches += m[`sluice_router_batches_total{outcome="routed"}`]
		c.published += m["sluice_router_messages_published_total"]
		if v, ok := m["sluice_flusher_files_written_total"]; ok {
			c.filesWritten += v
			haveFiles = true
		}
	}
	if !haveFiles {
		c.filesWritten, c.filesCounted = float64(countPackFiles(dir)), true
	}
	return c
}

// scrape returns the samples of a Prometheus text exposition, keyed by name
// and labels as printed.
func scrape(ctx context.Context, hc *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] += v
		}
	}
	return out, sc.Err()
}

// countPackFiles counts the Arrow files (packs and segments) under dir.
func countPackFiles(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".arrow") {
			n++
		}
		return nil
	})
	return n
}

// flusherHWM is the peak resident set (VmHWM) of the processes that run a
// flusher: `sluice dev` itself (one process per case, so the peak is the
// case's), or the largest of a cluster's flushers.
func flusherHWM(p kit.Pipeline) (kib int64) {
	for _, proc := range p.Services() {
		if proc.Name != "sluice-dev" && !strings.HasPrefix(proc.Name, "flusher-") {
			continue
		}
		if v := vmHWM(proc.Pid()); v > kib {
			kib = v
		}
	}
	return kib
}

func vmHWM(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// cpuTime is the user plus system CPU time of process pid (0 when unknown).
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is parenthesised and may hold spaces:
	// count fields after its closing parenthesis (utime, stime are fields
	// 14 and 15, so the 12th and 13th after it).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+st) * time.Second / clockTicks
}
