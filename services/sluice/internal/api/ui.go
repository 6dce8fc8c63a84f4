package api

import (
	_ "embed"
	"net/http"
)

//go:embed ui.html
var uiHTML []byte

func (a *handler) ui(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(uiHTML)
}
