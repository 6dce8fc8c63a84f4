package ui

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// A page in headless Chromium driven over the DevTools protocol, for the
// tests that click (--dump-dom only renders): navigate, evaluate
// JavaScript in the page (clicks included), take a screenshot. One caller
// at a time; events are read and dropped.
type page struct {
	t  *testing.T
	ws *websocket.Conn
	id int
}

var devtoolsRE = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// openPage starts chromium with remote debugging on a free loopback port
// and attaches to its first tab; both end with the test.
func openPage(t *testing.T, bin string) *page {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--remote-allow-origins=http://127.0.0.1", "--window-size=1400,1000", "--hide-scrollbars", "about:blank")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := devtoolsRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	var browser string
	select {
	case browser = <-found:
	case <-time.After(time.Minute):
		t.Fatal("chromium never said where its DevTools listen")
	}
	host := strings.TrimPrefix(browser, "ws://")
	host = host[:strings.Index(host, "/")]
	var targets []struct {
		Type string `json:"type"`
		WS   string `json:"webSocketDebuggerUrl"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get("http://" + host + "/json/list")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&targets)
			resp.Body.Close()
		}
		for _, tg := range targets {
			if tg.Type == "page" {
				ws, err := websocket.Dial(tg.WS, "", "http://127.0.0.1")
				if err != nil {
					t.Fatalf("attaching to chromium's tab: %v", err)
				}
				ws.MaxPayloadBytes = 64 << 20
				t.Cleanup(func() { ws.Close() })
				return &page{t: t, ws: ws}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromium has no tab: %v %+v", err, targets)
		}
	}
}

// call sends one DevTools command and returns its result.
func (p *page) call(method string, params any) json.RawMessage {
	p.t.Helper()
	p.id++
	if err := websocket.JSON.Send(p.ws, map[string]any{"id": p.id, "method": method, "params": params}); err != nil {
		p.t.Fatalf("%s: %v", method, err)
	}
	_ = p.ws.SetReadDeadline(time.Now().Add(time.Minute))
	for {
		var m struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := websocket.JSON.Receive(p.ws, &m); err != nil {
			p.t.Fatalf("%s: reading the answer: %v", method, err)
		}
		if m.ID != p.id {
			continue // an event
		}
		if m.Error != nil {
			p.t.Fatalf("%s: %s", method, m.Error.Message)
		}
		return m.Result
	}
}

func (p *page) navigate(url string) {
	p.t.Helper()
	p.call("Page.navigate", map[string]any{"url": url})
}

// eval runs expr in the page (awaiting a promise) and decodes its value
// into out (nil: dropped).
func (p *page) eval(expr string, out any) {
	p.t.Helper()
	raw := p.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true})
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		p.t.Fatal(err)
	}
	if r.Exception != nil {
		p.t.Fatalf("evaluating %s: %s %s", expr, r.Exception.Text, r.Exception.Exception.Description)
	}
	if out != nil && len(r.Result.Value) > 0 {
		if err := json.Unmarshal(r.Result.Value, out); err != nil {
			p.t.Fatalf("evaluating %s: %v (%s)", expr, err, r.Result.Value)
		}
	}
}

// waitFor evaluates expr (a boolean) until it is true, or fails saying what.
func (p *page) waitFor(d time.Duration, what, expr string) {
	p.t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(200 * time.Millisecond) {
		var ok bool
		p.eval("!!("+expr+")", &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var body string
			p.eval("document.body ? document.body.innerText : ''", &body)
			p.t.Fatalf("%s: not after %s; the page says:\n%s", what, d, body)
		}
	}
}

// screenshot writes the whole page (beyond the window too) as a PNG to path.
func (p *page) screenshot(path string) {
	p.t.Helper()
	var m struct {
		Size struct {
			Width  float64 `json:"width"`
			Height float64 `json:"height"`
		} `json:"cssContentSize"`
	}
	if err := json.Unmarshal(p.call("Page.getLayoutMetrics", map[string]any{}), &m); err != nil {
		p.t.Fatal(err)
	}
	var r struct {
		Data string `json:"data"`
	}
	clip := map[string]any{"x": 0, "y": 0, "width": m.Size.Width, "height": m.Size.Height, "scale": 1}
	if err := json.Unmarshal(p.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true, "clip": clip}), &r); err != nil {
		p.t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s (%d bytes)", path, len(b))
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
