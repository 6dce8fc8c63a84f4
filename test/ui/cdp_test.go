package ui

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A tab in headless Chromium driven over the DevTools protocol (chromedp),
// for the tests that click (--dump-dom only renders) without the
// credentials newClicker answers: navigate, evaluate JavaScript in the
// page (clicks included), take a screenshot. One caller at a time.
type tab struct {
	t   *testing.T
	ctx context.Context
}

// openPage starts chromium and opens a tab; both end with the test.
func openPage(t *testing.T, bin string) *tab {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return &tab{t: t, ctx: ctx}
}

func (p *tab) navigate(url string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		p.t.Fatalf("opening %s: %v", url, err)
	}
}

// eval runs expr in the page (awaiting a promise) and decodes its value
// into out (nil: dropped).
func (p *tab) eval(expr string, out any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
	defer cancel()
	if out == nil {
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](expr, chromedp.EvalAwaitPromise)); err != nil {
			p.t.Fatalf("evaluating %s: %v", expr, err)
		}
		return
	}
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("evaluating %s: %v", expr, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		p.t.Fatalf("evaluating %s: %v (%s)", expr, err, raw)
	}
}

// waitFor evaluates expr (a boolean) until it is true, or fails saying what.
// An evaluation the page's own navigation cuts off (a form submitted, a
// link followed) is asked again.
func (p *tab) waitFor(d time.Duration, what, expr string) {
	p.t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
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
func (p *tab) screenshot(path string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
	defer cancel()
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", path, err)
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
