package api

import (
	"encoding/json"
	"time"
)

// Snapshot is one published catalog snapshot.
type Snapshot struct {
	Version     uint64    `json:"version"`
	PublishedAt time.Time `json:"published_at"`
	ThroughLSN  string    `json:"through_lsn"`
	Packs       int64     `json:"packs"`
	// Pinned marks a snapshot pinned against expiry, with its reason.
	Pinned    bool   `json:"pinned"`
	PinReason string `json:"pin_reason,omitempty"`
}

// RowsPage is one keyset page of a destination's table at a snapshot. Rows
// are JSON objects equal to the source rows' to_jsonb; Next is the opaque
// cursor of the following page, empty on the last one.
type RowsPage struct {
	Snapshot uint64            `json:"snapshot"`
	Rows     []json.RawMessage `json:"rows"`
	Next     string            `json:"next,omitempty"`
}

// Error is every error response body.
type Error struct {
	Error string `json:"error"`
}
