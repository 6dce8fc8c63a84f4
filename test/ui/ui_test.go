package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Shutdown()
	kit.Cleanup()
	os.Exit(code)
}

// chromium finds Debian's chromium (apt-get install chromium).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (apt-get install -y chromium): the status page cannot be rendered")
	return ""
}

// browse runs headless chromium on url with extra flags (--dump-dom or
// --screenshot=...) and returns its stdout.
func browse(t *testing.T, bin, url string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000"}
	args = append(append(args, extra...), url)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, errb.String())
	}
	return out.String()
}

// jaegerUI is the telemetry.jaeger_ui the UI tests configure: the
// destination page links traces there.
const jaegerUI = "http://127.0.0.1:16686"

// startDemo runs `sluice dev` with its own demo Postgres (no source.dsn).
func startDemo(t *testing.T, tenants int) string {
	t.Helper()
	return startDev(t, fmt.Sprintf("demo:\n  tenants: %d\n  rate: 20\n", tenants))
}

// startDev runs `sluice dev` with head (YAML: a demo: or a source:
// section) and the settings every UI test shares, with env added to its
// environment (SLUICE_* overrides), and returns its HTTP base URL.
func startDev(t *testing.T, head string, env ...string) string {
	t.Helper()
	bin, err := kit.SluiceBin()
	if err != nil {
		t.Fatal(err)
	}
	port, err := kit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The demo Postgres runs as user postgres under data_dir.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	server := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := head + fmt.Sprintf(`nats:
  url: embedded
catalog:
  url: embedded
data_dir: %s
delivery:
  flush_interval: 1s
  partitions: 4
publisher:
  interval: 500ms
http:
  listen: 127.0.0.1:%d
telemetry:
  log_level: info
  otlp_endpoint: ""
  jaeger_ui: %s
`, filepath.Join(dir, "data"), port, jaegerUI)
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &kit.Proc{Name: "sluice-dev", Bin: bin, Args: []string{"dev", "--config", path}, Env: env, Dir: dir, Ready: server + "/healthz"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sluice dev log:\n%s", p.Tail(4000))
		}
		_ = p.Stop(60 * time.Second)
	})
	return server
}

func getJSON(server, path string, v any) error {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(server + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

type destPage struct {
	Total        int `json:"total"`
	Destinations []struct {
		Destination string `json:"destination"`
		State       string `json:"state"`
	} `json:"destinations"`
}

type summary struct {
	Snapshots []struct {
		Version uint64 `json:"version"`
	} `json:"snapshots"`
	Streams []struct {
		Name      string `json:"name"`
		Consumers []struct {
			Name string `json:"name"`
		} `json:"consumers"`
	} `json:"streams"`
}

// waitReady polls until destinations, a snapshot and consumers exist.
func waitReady(t *testing.T, server string) (destPage, summary) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		var d destPage
		var s summary
		last = getJSON(server, "/api/v1/destinations?limit=1000", &d)
		if last == nil {
			last = getJSON(server, "/api/v1/status/summary", &s)
		}
		if last == nil {
			consumers := 0
			for _, st := range s.Streams {
				consumers += len(st.Consumers)
			}
			if d.Total > 0 && len(s.Snapshots) > 0 && consumers > 0 {
				return d, s
			}
			last = fmt.Errorf("destinations %d, snapshots %d, consumers %d", d.Total, len(s.Snapshots), consumers)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("the demo never had destinations, a snapshot and consumers: %v", last)
	return destPage{}, summary{}
}

// table returns the rendered <table id=...> of a dumped DOM.
func table(t *testing.T, dom, id string) string {
	t.Helper()
	start := strings.Index(dom, `<table id="`+id+`">`)
	if start < 0 {
		t.Fatalf("the page has no table %s:\n%s", id, dom)
	}
	end := strings.Index(dom[start:], "</table>")
	return dom[start : start+end]
}

var (
	rowRE   = regexp.MustCompile(`<tr><td>([^<]+)</td><td class="num">\d+</td><td><span class="state s-(\w+)">(\w+)</span></td>`)
	snapRE  = regexp.MustCompile(`<tr><td>v(\d+)</td>`)
	tagRE   = regexp.MustCompile(`(?s)<script.*?</script>|<style.*?</style>|<[^>]+>`)
	spaceRE = regexp.MustCompile(`\s+`)
)

// text is what a person reads in a piece of DOM.
func text(s string) string {
	return strings.TrimSpace(spaceRE.ReplaceAllString(html.UnescapeString(tagRE.ReplaceAllString(s, " ")), " "))
}

// TestStatusPage renders /ui of a running demo in headless Chromium and
// checks what a person would see: destination rows with their states, the
// latest snapshot version, the JetStream streams with their consumer
// counts, and a search narrowing the list. SLUICE_UI_SCREENSHOT=path also
// keeps a 1400x1000 screenshot there (docs/ui.png is one).
func TestStatusPage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sluice dev with its demo Postgres")
	}
	browser := chromium(t)
	tenants := 40
	if v, err := strconv.Atoi(os.Getenv("SLUICE_UI_TENANTS")); err == nil && v > 0 {
		tenants = v
	}
	server := startDemo(t, tenants)
	dests, sum := waitReady(t, server)
	t.Logf("demo ready: %d destinations, snapshot v%d", dests.Total, sum.Snapshots[0].Version)

	dom := browse(t, browser, server+"/ui", "--dump-dom")
	if !strings.Contains(dom, `id="updated">updated `) {
		t.Fatalf("the page did not load its data:\n%s", text(dom))
	}

	// Destinations: a page of rows, each with a state, sorted, and the count.
	rows := rowRE.FindAllStringSubmatch(table(t, dom, "dests"), -1)
	if want := min(50, dests.Total); len(rows) < want {
		t.Fatalf("the page shows %d destination rows, want %d:\n%s", len(rows), want, text(table(t, dom, "dests")))
	}
	known := map[string]bool{}
	for _, d := range dests.Destinations {
		known[d.Destination] = true
	}
	valid := map[string]bool{"healthy": true, "buffering": true, "flushing": true, "lagging": true, "halted": true}
	for i, r := range rows {
		if !known[r[1]] || !valid[r[2]] || r[2] != r[3] {
			t.Fatalf("row %d: destination %q state %q", i, r[1], r[2])
		}
		if i > 0 && rows[i-1][1] >= r[1] {
			t.Fatalf("rows not sorted: %s before %s", rows[i-1][1], r[1])
		}
	}
	if !regexp.MustCompile(`\d+ destinations?`).MatchString(text(dom)) {
		t.Fatalf("no destination count on the page: %s", text(dom))
	}

	// Snapshots: the latest version the API had before rendering, or newer.
	m := snapRE.FindAllStringSubmatch(table(t, dom, "snaps"), -1)
	if len(m) == 0 {
		t.Fatalf("no snapshot on the page: %s", text(table(t, dom, "snaps")))
	}
	if v, _ := strconv.ParseUint(m[0][1], 10, 64); v < sum.Snapshots[0].Version {
		t.Fatalf("the page shows snapshot v%d first, the API had v%d", v, sum.Snapshots[0].Version)
	}

	// JetStream: every stream with its consumer count and its consumers.
	streams := text(table(t, dom, "streams"))
	for _, st := range sum.Streams {
		n := len(st.Consumers)
		want := fmt.Sprintf("%s (%d consumer", st.Name, n)
		if !strings.Contains(streams, want) {
			t.Fatalf("the page does not show %q: %s", want, streams)
		}
		for _, c := range st.Consumers {
			if !strings.Contains(streams, c.Name) {
				t.Fatalf("the page does not show consumer %s of %s: %s", c.Name, st.Name, streams)
			}
		}
	}
	if !strings.Contains(streams, "pending") && !strings.Contains(dom, "ack pending") {
		t.Fatal("no pending columns")
	}

	// Search: the server narrows the list to one destination.
	one := dests.Destinations[len(dests.Destinations)-1].Destination
	dom = browse(t, browser, server+"/ui?q="+one, "--dump-dom")
	rows = rowRE.FindAllStringSubmatch(table(t, dom, "dests"), -1)
	if len(rows) != 1 || rows[0][1] != one {
		t.Fatalf("searching %q shows %v: %s", one, rows, text(table(t, dom, "dests")))
	}

	// A screenshot renders (and is kept when asked).
	shot := filepath.Join(t.TempDir(), "ui.png")
	if p := os.Getenv("SLUICE_UI_SCREENSHOT"); p != "" {
		shot, _ = filepath.Abs(p)
	}
	browse(t, browser, server+"/ui", "--screenshot="+shot, "--window-size=1400,1000", "--hide-scrollbars")
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10<<10 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot %s", shot)
}
