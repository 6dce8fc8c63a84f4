package api

// Snapshots and their retention (`sluice snapshots`, `sluice snapshots pin
// V`, `sluice snapshots unpin V`):
//
//	GET  /api/v1/snapshots[?before=V&limit=N]   retained snapshots, oldest first: the newest N
//	                                            (default 1000, at most 10000) below version V
//	                                            (default: from the newest); when older ones
//	                                            remain, the header Sluice-Next-Before carries
//	                                            the before= of the next page
//	GET  /api/v1/snapshots/latest               the newest published snapshot
//	POST /api/v1/snapshots/{version}/pin        body {"reason": "..."} optional: never expire it
//	POST /api/v1/snapshots/{version}/unpin      let it expire again
//
// Only retained snapshots are listed: at or above the expiry horizon the
// publisher advances (catalog.snapshot_retention, catalog.snapshot_retain_min)
// or pinned; each carries "pinned". A pin answers 200 {version, reason,
// pinned_at}; 404 for a version never published; 410 for an expired one
// (its message names the oldest retained version), like a read of it. The
// POSTs pass the request guard of every change (guard.go).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

const (
	defaultSnapshotPage = 1000
	maxSnapshotPage     = 10000
	// NextBeforeHeader carries the before= of the next page of snapshots.
	NextBeforeHeader = "Sluice-Next-Before"
)

// SnapshotsQuery asks for one page of retained snapshots.
type SnapshotsQuery struct {
	Before uint64 // versions below it; 0: from the newest
	Limit  int
}

// SnapshotsPage is one page of retained snapshots, oldest first; Next is
// the Before of the following page (0 on the last).
type SnapshotsPage struct {
	Snapshots []Snapshot
	Next      uint64
}

// Pin is a snapshot's pin.
type Pin struct {
	Version  uint64    `json:"version"`
	Pinned   bool      `json:"pinned"`
	Reason   string    `json:"reason,omitempty"`
	PinnedAt time.Time `json:"pinned_at,omitzero"`
}

// PinRequest is the optional body of a pin POST.
type PinRequest struct {
	Reason string `json:"reason,omitempty"`
}

// ErrGone is returned by Reads for an expired snapshot; the API answers 410.
var ErrGone = errors.New("snapshot expired")

func registerSnapshots(h interface {
	Handle(pattern string, handler http.Handler)
}, a *handler) {
	h.Handle("GET /api/v1/snapshots", http.HandlerFunc(a.snapshots))
	h.Handle("GET /api/v1/snapshots/latest", http.HandlerFunc(a.latest))
	h.Handle("POST /api/v1/snapshots/{version}/pin", changes("to pin a snapshot", a.pin))
	h.Handle("POST /api/v1/snapshots/{version}/unpin", changes("to unpin a snapshot", a.unpin))
}

func (a *handler) snapshots(w http.ResponseWriter, r *http.Request) {
	if a.d.Reads == nil {
		a.fail(w, errors.New("this process has no catalog: ask the process running the indexer/publisher or sluice dev"))
		return
	}
	q := r.URL.Query()
	sq := SnapshotsQuery{Limit: defaultSnapshotPage}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			a.fail(w, errors.Join(ErrBadRequest, errors.New("before must be a positive version number")))
			return
		}
		sq.Before = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxSnapshotPage {
			a.fail(w, errors.Join(ErrBadRequest, fmt.Errorf("limit must be between 1 and %d", maxSnapshotPage)))
			return
		}
		sq.Limit = n
	}
	page, err := a.d.Reads.Snapshots(r.Context(), sq)
	if err != nil {
		a.fail(w, err)
		return
	}
	if page.Snapshots == nil {
		page.Snapshots = []Snapshot{}
	}
	redactPins(r, page.Snapshots)
	if page.Next != 0 {
		w.Header().Set(NextBeforeHeader, strconv.FormatUint(page.Next, 10))
	}
	writeJSON(w, http.StatusOK, page.Snapshots)
}

// NewestReads is implemented by Reads that read the newest snapshot more
// cheaply than a one-snapshot page (CatalogReads: one statement). Every
// poll of the latest snapshot goes through it: /api/v1/snapshots/latest and
// /api/v1/status, which `sluice wait` reads every 200 ms.
type NewestReads interface {
	// Newest returns the newest published snapshot, nil when none is.
	Newest(ctx context.Context) (*Snapshot, error)
}

// newest returns the newest published snapshot (nil when none is).
func (a *handler) newest(r *http.Request) (*Snapshot, error) {
	if n, ok := a.d.Reads.(NewestReads); ok {
		return n.Newest(r.Context())
	}
	page, err := a.d.Reads.Snapshots(r.Context(), SnapshotsQuery{Limit: 1})
	if err != nil || len(page.Snapshots) == 0 {
		return nil, err
	}
	return &page.Snapshots[len(page.Snapshots)-1], nil
}

func (a *handler) latest(w http.ResponseWriter, r *http.Request) {
	if a.d.Reads == nil {
		a.fail(w, errors.New("this process has no catalog"))
		return
	}
	s, err := a.newest(r)
	if err != nil {
		a.fail(w, err)
		return
	}
	if s == nil {
		a.fail(w, errors.Join(ErrNotFound, errors.New("no snapshot has been published yet")))
		return
	}
	one := []Snapshot{*s}
	redactPins(r, one)
	writeJSON(w, http.StatusOK, one[0])
}

// pinTarget checks a pin or unpin POST and reads its version.
func (a *handler) pinTarget(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	if a.d.Reads == nil {
		a.fail(w, errors.New("this process has no catalog"))
		return 0, false
	}
	v, err := strconv.ParseUint(r.PathValue("version"), 10, 64)
	if err != nil || v == 0 {
		a.fail(w, errors.Join(ErrBadRequest, errors.New("the path must name a snapshot version (a positive number)")))
		return 0, false
	}
	return v, true
}

func (a *handler) pin(w http.ResponseWriter, r *http.Request) {
	v, ok := a.pinTarget(w, r)
	if !ok {
		return
	}
	var req PinRequest
	if err := readReason(r, &req.Reason); err != nil {
		a.fail(w, err)
		return
	}
	p, err := a.d.Reads.Pin(r.Context(), v, req.Reason)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (a *handler) unpin(w http.ResponseWriter, r *http.Request) {
	v, ok := a.pinTarget(w, r)
	if !ok {
		return
	}
	if err := a.d.Reads.Unpin(r.Context(), v); err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, Pin{Version: v})
}
