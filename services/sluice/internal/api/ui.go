package api

import (
	_ "embed"
	"net/http"
)

//go:embed ui.html
var uiHTML []byte

// uiActionsJS is the status page's actions (buttons that call the API's
// action routes), served as /ui/actions.js behind the same token as /ui.
//
//go:embed ui_actions.js
var uiActionsJS []byte

func (a *handler) ui(w http.ResponseWriter, _ *http.Request) {
	uiHeaders(w, "text/html; charset=utf-8")
	_, _ = w.Write(uiHTML)
}

func (a *handler) uiActions(w http.ResponseWriter, _ *http.Request) {
	uiHeaders(w, "text/javascript; charset=utf-8")
	_, _ = w.Write(uiActionsJS)
}

// uiHeaders: never cached, and never framed by another page (its buttons
// change state: no click-jacking).
func uiHeaders(w http.ResponseWriter, contentType string) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
}
