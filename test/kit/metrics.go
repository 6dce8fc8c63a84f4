package kit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// BaseURL is the process's HTTP base URL (its Ready URL without /healthz),
// or "" for a process that is not probed over HTTP.
func (p *Proc) BaseURL() string {
	if !strings.HasPrefix(p.Ready, "http") {
		return ""
	}
	return strings.TrimSuffix(p.Ready, "/healthz")
}

// Samples are one scrape of a /metrics page: series ("name{labels}") to
// value.
type Samples map[string]float64

// Scrape reads the Prometheus text exposition of p's /metrics.
func Scrape(ctx context.Context, p *Proc) (Samples, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.BaseURL()+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", p.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", p.Name, resp.Status)
	}
	s := Samples{}
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
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		s[line[:i]] = v
	}
	return s, sc.Err()
}

// Sum adds the series of metric name whose labels contain every one of
// labels (each `key="value"`).
func (s Samples) Sum(name string, labels ...string) float64 {
	var total float64
	for series, v := range s {
		n, rest, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// Status reads p's /api/v1/status (the statuses of the services it runs,
// the snapshot, the streams).
func Status(ctx context.Context, p *Proc) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.BaseURL()+"/api/v1/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the status of %s: %w", p.Name, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("decoding the status of %s: %w", p.Name, err)
	}
	return out, nil
}
