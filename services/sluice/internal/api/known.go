package api

// GET /api/v1/destinations/list?state=S&after=NAME&limit=N[&destination=NAME|value=V]
// every destination the state database knows (a cursor or a lifecycle
// row), in name order, keyset-paged: pass the page's next as after= for
// the next page (absent on the last). Each row carries the flusher's live
// view when a flusher of this process holds the destination.

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice/services/flusher"
	"github.com/sluice-cdc/sluice/shared/state"
)

// KnownDestination is one row of GET /api/v1/destinations/list.
type KnownDestination struct {
	state.KnownDestination
	Live *DestinationRow `json:"live,omitempty"` // the flusher's view, when it has one
}

// KnownDestinationsPage is the body of GET /api/v1/destinations/list.
type KnownDestinationsPage struct {
	Destinations []KnownDestination `json:"destinations"`
	Next         string             `json:"next,omitempty"` // after= of the next page; empty on the last
}

func (a *handler) knownDestinations(w http.ResponseWriter, r *http.Request) {
	if a.noStates(w) {
		return
	}
	q := r.URL.Query()
	limit, err := parseBound(q.Get("limit"), state.DefaultListLimit, 1, state.MaxListLimit, "limit")
	if err != nil {
		a.fail(w, err)
		return
	}
	only := state.DestinationState(strings.ToLower(strings.TrimSpace(q.Get("state"))))
	if only != "" && !only.Valid() {
		a.fail(w, errors.Join(ErrBadRequest, fmt.Errorf("state %q: want active, paused, draining, drained or retired", only)))
		return
	}
	name, _, err := a.optionalTarget(q)
	if err != nil {
		a.fail(w, err)
		return
	}
	rows, more, err := a.d.States.List(r.Context(), state.ListOptions{State: only, Name: name, After: q.Get("after"), Limit: limit})
	if err != nil {
		a.fail(w, err)
		return
	}
	live, err := a.liveByName()
	if err != nil {
		a.fail(w, err)
		return
	}
	page := KnownDestinationsPage{Destinations: make([]KnownDestination, 0, len(rows))}
	for _, row := range rows {
		k := KnownDestination{KnownDestination: row}
		if i, ok := slices.BinarySearchFunc(live, row.Destination, func(d flusher.DestinationStatus, n string) int { return strings.Compare(d.Destination, n) }); ok {
			d := live[i]
			k.Live = &DestinationRow{Destination: d.Destination, Partition: d.Partition, State: d.State,
				BufferedRows: d.BufferedRows, BufferedBytes: d.BufferedBytes, Cursor: d.Cursor,
				LagSeconds: d.AgeSeconds, LastPack: d.LastPack, LastError: d.LastError}
		}
		page.Destinations = append(page.Destinations, k)
	}
	if more && len(rows) > 0 {
		page.Next = rows[len(rows)-1].Destination
	}
	writeJSON(w, http.StatusOK, page)
}

// liveByName returns the flushers' destinations of this process sorted by
// name (none without a flusher).
func (a *handler) liveByName() ([]flusher.DestinationStatus, error) {
	var all []flusher.DestinationStatus
	for _, f := range a.flusherStatuses() {
		ds, err := flusherDestinations(f())
		if err != nil {
			return nil, err
		}
		all = append(all, ds...)
	}
	slices.SortStableFunc(all, cmpDestination)
	return all, nil
}
