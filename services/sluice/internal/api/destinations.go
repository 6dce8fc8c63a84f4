package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/services/flusher"
	"github.com/sluice-cdc/sluice/shared/httpx"
)

// Paging bounds of GET /api/v1/destinations.
const (
	defaultDestinationsLimit = 50
	maxDestinationsLimit     = 1000
	// summarySnapshots is how many of the latest snapshots the summary
	// carries (newest first).
	summarySnapshots = 10
)

// DestinationRow is one destination as the status page shows it.
type DestinationRow struct {
	Destination   string  `json:"destination"`
	Partition     int     `json:"partition"`
	State         string  `json:"state"`
	BufferedRows  int64   `json:"buffered_rows"`
	BufferedBytes int64   `json:"buffered_bytes"`
	Cursor        string  `json:"cursor"`
	LagSeconds    float64 `json:"lag_seconds"` // how long its oldest unflushed row has waited
	LastPack      string  `json:"last_pack,omitempty"`
	LastError     string  `json:"last_error,omitempty"`
}

// DestinationsPage is the body of GET /api/v1/destinations: the rows
// matching q and state, sorted by destination, from offset.
type DestinationsPage struct {
	Total        int              `json:"total"` // matching rows
	All          int              `json:"all"`   // rows before filtering
	States       map[string]int   `json:"states"`
	Offset       int              `json:"offset"`
	Limit        int              `json:"limit"`
	Available    bool             `json:"available"` // false: no flusher runs in this process
	Destinations []DestinationRow `json:"destinations"`
}

// Summary is the body of GET /api/v1/status/summary: /api/v1/status
// without the per-destination lists (those are paged through
// /api/v1/destinations), plus the latest snapshots, newest first.
type Summary struct {
	Services  map[string]json.RawMessage `json:"services"`
	Snapshots []Snapshot                 `json:"snapshots"`
	Streams   []StreamStatus             `json:"streams"`
	Time      time.Time                  `json:"time"`
}

// registerDestinations mounts the endpoints the status page polls.
func registerDestinations(h *httpx.Server, a *handler) {
	h.Handle("GET /api/v1/destinations", http.HandlerFunc(a.destinations))
	h.Handle("GET /api/v1/status/summary", http.HandlerFunc(a.summary))
}

// flusherStatuses returns the Statuses entries of flushers: "flusher" and
// "flusher-<n>" when a process runs several.
func (a *handler) flusherStatuses() []func() any {
	var names []string
	for name := range a.d.Statuses {
		if name == "flusher" || strings.HasPrefix(name, "flusher-") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	out := make([]func() any, 0, len(names))
	for _, n := range names {
		out = append(out, a.d.Statuses[n])
	}
	return out
}

// flusherDestinations reads a flusher's status: the flusher's own type, as
// its component returns it (flusher.Spec). Anything else is a wiring error.
func flusherDestinations(v any) ([]flusher.DestinationStatus, error) {
	switch s := v.(type) {
	case flusher.Status:
		return s.Destinations, nil
	case *flusher.Status:
		if s == nil {
			return nil, nil
		}
		return s.Destinations, nil
	}
	return nil, fmt.Errorf("reading flusher status: %T is not a flusher.Status", v)
}

// parseBound reads a non-negative integer parameter.
func parseBound(q string, def, lo, hi int, name string) (int, error) {
	if q == "" {
		return def, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < lo || n > hi {
		return 0, errors.Join(ErrBadRequest, fmt.Errorf("%s must be an integer between %d and %d", name, lo, hi))
	}
	return n, nil
}

func (a *handler) destinations(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, err := parseBound(q.Get("offset"), 0, 0, 1<<31-1, "offset")
	if err != nil {
		a.fail(w, err)
		return
	}
	limit, err := parseBound(q.Get("limit"), defaultDestinationsLimit, 1, maxDestinationsLimit, "limit")
	if err != nil {
		a.fail(w, err)
		return
	}
	var states []string
	for s := range strings.SplitSeq(q.Get("state"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			states = append(states, strings.ToLower(s))
		}
	}
	only, filtered, err := a.optionalTarget(q)
	if err != nil {
		a.fail(w, err)
		return
	}
	match := func(d *flusher.DestinationStatus) bool { return !filtered || d.Destination == only }
	page, err := a.destinationsPage(strings.ToLower(strings.TrimSpace(q.Get("q"))), states, match, offset, limit)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// destinationsPage filters (q: a substring of the name; states; match: the
// one destination a destination= or value= parameter names), sorts and
// pages the flushers' destinations. Only the page is converted and sent;
// the filter is one pass.
func (a *handler) destinationsPage(q string, states []string, match func(*flusher.DestinationStatus) bool, offset, limit int) (DestinationsPage, error) {
	p := DestinationsPage{States: map[string]int{}, Offset: offset, Limit: limit, Destinations: []DestinationRow{}}
	var all []flusher.DestinationStatus
	for _, f := range a.flusherStatuses() {
		ds, err := flusherDestinations(f())
		if err != nil {
			return p, err
		}
		p.Available = true
		if all == nil {
			all = ds
		} else {
			all = append(slices.Clip(all), ds...)
		}
	}
	if !slices.IsSortedFunc(all, cmpDestination) {
		all = slices.Clone(all)
		slices.SortStableFunc(all, cmpDestination)
	}
	p.All = len(all)
	matched := make([]int, 0, min(len(all), offset+limit))
	for i := range all {
		d := &all[i]
		p.States[d.State]++
		if q != "" && !strings.Contains(strings.ToLower(d.Destination), q) {
			continue
		}
		if len(states) > 0 && !slices.Contains(states, d.State) {
			continue
		}
		if !match(d) {
			continue
		}
		p.Total++
		if p.Total > offset && len(matched) < limit {
			matched = append(matched, i)
		}
	}
	for _, i := range matched {
		d := all[i]
		p.Destinations = append(p.Destinations, DestinationRow{
			Destination: d.Destination, Partition: d.Partition, State: d.State,
			BufferedRows: d.BufferedRows, BufferedBytes: d.BufferedBytes, Cursor: d.Cursor,
			LagSeconds: d.AgeSeconds, LastPack: d.LastPack, LastError: d.LastError,
		})
	}
	return p, nil
}

func cmpDestination(x, y flusher.DestinationStatus) int {
	return strings.Compare(x.Destination, y.Destination)
}

func (a *handler) summary(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	s := Summary{Services: map[string]json.RawMessage{}, Snapshots: []Snapshot{}, Time: time.Now().UTC()}
	for name, f := range a.d.Statuses {
		b, err := withoutDestinations(f())
		if err != nil {
			a.fail(w, fmt.Errorf("encoding %s status: %w", name, err))
			return
		}
		s.Services[name] = b
	}
	if a.d.Reads != nil {
		if page, err := a.d.Reads.Snapshots(ctx, SnapshotsQuery{Limit: summarySnapshots}); err == nil {
			for i := len(page.Snapshots) - 1; i >= 0; i-- {
				s.Snapshots = append(s.Snapshots, page.Snapshots[i])
			}
		}
	}
	s.Streams = a.streams(ctx)
	if s.Streams == nil {
		s.Streams = []StreamStatus{}
	}
	writeJSON(w, http.StatusOK, s)
}

// withoutDestinations encodes a status leaving out its "destinations"
// list, which can hold 10,000 entries.
func withoutDestinations(v any) (json.RawMessage, error) {
	switch s := v.(type) {
	case flusher.Status:
		s.Destinations = nil
		v = s
	case *flusher.Status:
		if s != nil {
			c := *s
			c.Destinations = nil
			v = c
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil || m == nil {
		return b, nil // not an object
	}
	if _, ok := m["destinations"]; !ok {
		return b, nil
	}
	delete(m, "destinations")
	return json.Marshal(m)
}
