// Package ui checks the status page /ui the way a person sees it: it starts
// a real `sluice dev` with its demo Postgres, renders the page in headless
// Chromium (Debian's chromium; the test skips with a message when it is
// absent) and reads the rendered DOM: destination rows with their states,
// the latest snapshot version, the JetStream streams with their consumer
// counts, and a server-side search; the charts moving under the demo's
// traffic, a destination's page with its rows, and a backfill's progress
// bar; its actions, clicked over the DevTools protocol (chromedp) with
// each one's effect read back from the API, and another site's page that
// tries them; and, against a real Jaeger, the trace view a pack's trace
// link opens, with the spans of all five services. SLUICE_UI_SCREENSHOT=path
// keeps a screenshot (docs/ui.png was taken this way, with
// SLUICE_UI_TENANTS=300) and SLUICE_UI_SCREENSHOT_DIR=docs the others
// (`make screenshots` takes them all).
// It never mocks a component.
package ui
