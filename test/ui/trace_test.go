package ui

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/test/kit"
)

var fiveServices = []string{"reader", "router", "flusher", "indexer", "publisher"}

type packsPage struct {
	Packs []struct {
		PackID string `json:"pack_id"`
		Trace  string `json:"traceparent"`
	} `json:"packs"`
	TraceView bool `json:"trace_view"`
}

type traceView struct {
	Services []string `json:"services"`
	Traces   []struct {
		Spans []struct {
			Operation  string `json:"operation"`
			Attributes []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"attributes"`
		} `json:"spans"`
	} `json:"traces"`
}

// flushes reports whether the view holds a flush span of destination d
// (a pack of a segment shares the trace of the group commit that wrote it,
// whose flush span can be another destination's).
func (v traceView) flushes(d string) bool {
	for _, tr := range v.Traces {
		for _, sp := range tr.Spans {
			if sp.Operation != "flusher.flush" {
				continue
			}
			for _, a := range sp.Attributes {
				if a.Key == "sluice.destination" && a.Value == d {
					return true
				}
			}
		}
	}
	return false
}

// TestTraceView: `sluice dev` exporting its spans to a real Jaeger (the
// v1.75.0 all-in-one make run starts, from ~/.cache/sluice/bin; with CI set
// the test fails rather than skip when it is missing), with
// telemetry.jaeger_query set and no external Jaeger UI. In headless
// Chromium, a destination's page links its last packs' traces to /ui's own
// trace view; a click on one draws the span tree of the flush and of the
// traces joined to it: spans of all five services, each row with its
// service, and a click on a span shows its attributes. The header's box
// opens a trace by id; an unknown id and a Jaeger that stopped are said
// so. SLUICE_UI_SCREENSHOT_DIR keeps ui-trace.png.
func TestTraceView(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sluice dev with its demo Postgres and Jaeger")
	}
	browser := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	j, ok, err := kit.StartJaeger(ctx, t.TempDir())
	if !ok {
		if os.Getenv("CI") != "" {
			t.Fatal("no Jaeger v2 binary in ~/.cache/sluice/bin: make test fetches it (make jaeger); CI must run this test, not skip it")
		}
		t.Skip("no Jaeger v2 binary in ~/.cache/sluice/bin: run make jaeger (deploy/fetch-jaeger.sh, several minutes the first time)")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer j.P.Stop(10 * time.Second)
	start := time.Now()
	server := startDev(t, "demo:\n  tenants: 6\n  rate: 10\n",
		"SLUICE_TELEMETRY_OTLP_ENDPOINT="+j.OTLP, "SLUICE_TELEMETRY_JAEGER_QUERY="+j.API, "SLUICE_TELEMETRY_JAEGER_UI=")
	dests, _ := waitReady(t, server)

	// A pack whose trace Jaeger has with all five services and its own
	// destination's flush: a flush is indexed and published within a
	// second or two of it.
	var dest, id string
	until(t, 3*time.Minute, "a pack's trace covering all five services", func() error {
		var last error
		for _, d := range dests.Destinations {
			var p packsPage
			if err := getJSON(server, "/api/v1/packs?limit=10&destination="+url.QueryEscape(d.Destination), &p); err != nil {
				return err
			}
			if !p.TraceView {
				return fmt.Errorf("/api/v1/packs says there is no trace view: %+v", p)
			}
			for _, k := range p.Packs[:min(3, len(p.Packs))] {
				f := strings.Split(k.Trace, "-")
				if len(f) != 4 {
					continue
				}
				var v traceView
				if err := getJSON(server, "/api/v1/traces/"+f[1], &v); err != nil {
					last = err
					continue
				}
				if slices.Equal(v.Services, fiveServices) && v.flushes(d.Destination) {
					dest, id = d.Destination, f[1]
					return nil
				}
				last = fmt.Errorf("trace %s of %s has services %v", f[1], d.Destination, v.Services)
			}
		}
		if last == nil {
			last = fmt.Errorf("no pack carries a trace yet")
		}
		return last
	})
	t.Logf("%.0fs from sluice dev's start to a trace with all five services (destination %s, trace %s)", time.Since(start).Seconds(), dest, id)

	p := openPage(t, browser)
	p.navigate(server + "/ui?destination=" + url.QueryEscape(dest))
	link := `document.querySelector('#d-packs a.trace[href="/ui?trace=` + id + `"]')` // id: hex digits
	p.waitFor(time.Minute, "the destination's page links the pack's trace to the trace view", link)
	var latest string
	p.eval(`(document.getElementById("d-traceview") || {}).href || ""`, &latest)
	if !strings.Contains(latest, "/ui?trace=") || strings.Contains(latest, "16686") {
		t.Errorf("the latest-trace link is %q, want the trace view", latest)
	}
	p.eval(link+".click()", nil)
	p.waitFor(time.Minute, "the trace view draws spans after the click",
		`location.search === "?trace=`+id+`" && (document.querySelectorAll("#trace .t-span").length > 0 || document.getElementById("t-error"))`)
	var errText string
	p.eval(`(document.getElementById("t-error") || {}).textContent || ""`, &errText)
	if errText != "" {
		t.Fatalf("the trace view says: %s", errText)
	}
	var drawn []string
	p.eval(`[...new Set([...document.querySelectorAll("#trace .t-span")].map(e => e.dataset.service))]`, &drawn)
	for _, s := range fiveServices {
		if !slices.Contains(drawn, s) {
			t.Errorf("the trace view draws no %s span (services drawn: %v)", s, drawn)
		}
	}
	var bars int
	p.eval(`[...document.querySelectorAll("#trace .t-span .t-bar")].filter(b => b.getBoundingClientRect().width >= 1).length`, &bars)
	var rows int
	p.eval(`document.querySelectorAll("#trace .t-span").length`, &rows)
	if bars != rows || rows == 0 {
		t.Errorf("%d of %d span rows have a visible duration bar", bars, rows)
	}
	t.Logf("trace view of %s: %d spans, services %v", id, rows, drawn)

	// A click on a flush's row shows its attributes. The view may hold the
	// flush spans of several destinations (a segment's group commit, and
	// the traces joined to it): the rows are clicked in turn until the one
	// of dest shows, each detail read from the row's own next sibling.
	var detail string
	p.eval(`(() => {
		let last = "";
		for (const row of document.querySelectorAll('#trace .t-span')) {
			if (!row.textContent.includes("flusher.flush")) continue;
			row.click();
			const d = row.nextElementSibling;
			if (!d || !d.classList.contains("t-detail")) continue;
			last = d.textContent;
			if (last.includes("sluice.destination"+`+js(dest)+`)) return last;
			row.click();
		}
		return last;
	})()`, &detail)
	for _, want := range []string{"sluice.destination", dest, "messaging.destination.name", "link"} {
		if !strings.Contains(detail, want) {
			t.Errorf("the flush span's details lack %q: %s", want, detail)
		}
	}
	if dir := shotDir(); dir != "" {
		abs, _ := filepath.Abs(filepath.Join(dir, "ui-trace.png"))
		p.screenshot(abs)
	}

	// The header's box opens a trace by id, or by its whole traceparent.
	p.navigate(server + "/ui")
	p.waitFor(time.Minute, "the status page's trace box", `document.getElementById("t-id")`)
	p.eval(`document.getElementById("t-id").value = `+js("00-"+id+"-0000000000000001-01")+`; document.getElementById("t-open").requestSubmit()`, nil)
	p.waitFor(time.Minute, "the trace view opened from the box", `location.search === "?trace=`+id+`" && document.querySelectorAll("#trace .t-span").length > 0`)

	// An unknown id, then a Jaeger that stopped: each said so.
	p.navigate(server + "/ui?trace=0123456789abcdef0123456789abcdef")
	p.waitFor(time.Minute, "the unknown trace said so", `document.getElementById("t-error")`)
	p.eval(`document.getElementById("t-error").textContent`, &errText)
	if !strings.Contains(errText, "has no trace 0123456789abcdef0123456789abcdef") {
		t.Errorf("an unknown trace: %q", errText)
	}
	if err := j.P.Stop(10 * time.Second); err != nil {
		t.Logf("stopping Jaeger: %v", err)
	}
	p.navigate(server + "/ui?trace=" + id)
	p.waitFor(time.Minute, "a stopped Jaeger said so", `document.getElementById("t-error")`)
	p.eval(`document.getElementById("t-error").textContent`, &errText)
	if !strings.Contains(errText, "does not answer") || !strings.Contains(errText, j.API) {
		t.Errorf("Jaeger stopped: %q", errText)
	}
}
