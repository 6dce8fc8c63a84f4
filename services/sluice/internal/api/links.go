package api

import (
	"encoding/json"
	"net/http"
)

// Links are where an operator looks beyond the API: the embedded NATS
// server (for the nats CLI), its monitoring endpoint, and Jaeger's UI.
// Empty fields are not set up in this process.
type Links struct {
	NATS        string `json:"nats,omitempty"`         // nats://host:port of the embedded server
	NATSMonitor string `json:"nats_monitor,omitempty"` // http://host:port of its /varz, /jsz
	JaegerUI    string `json:"jaeger_ui,omitempty"`    // telemetry.jaeger_ui
}

// links serves GET /api/v1/links.
func (a *handler) links(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a.d.Links)
}
