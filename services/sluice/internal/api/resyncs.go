package api

// Live resyncs (`sluice resync`): the queue lives in the state database
// (state.Resyncs); the active reader polls it and runs one resync per table
// at a time (services/reader resync.go).
//
//	POST /api/v1/resyncs        body {"table": "S.T"} with optional
//	                            "destination": NAME or "value": V (one
//	                            destination's rows), or without a body
//	                            ?table=S.T[&destination=NAME|&value=V];
//	                            200: the queued request
//	GET  /api/v1/resyncs        queued, running and finished ones, newest first
//	GET  /api/v1/resyncs/{id}   one
//
// The table must be listed in source.tables under its canonical name; a
// destination is named as everywhere else (target.go): a canonical name,
// or a tenant's routing value. The POST passes the request guard of every
// change (guard.go).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/state"
)

// ResyncRequest is the body of POST /api/v1/resyncs.
type ResyncRequest struct {
	Table       string  `json:"table"`
	Destination string  `json:"destination,omitempty"`
	Value       *string `json:"value,omitempty"`
}

func registerResyncs(h *httpx.Server, a *handler) {
	h.Handle("POST /api/v1/resyncs", changes("to start a resync", a.resyncCreate))
	h.Handle("GET /api/v1/resyncs", http.HandlerFunc(a.resyncList))
	h.Handle("GET /api/v1/resyncs/{id}", http.HandlerFunc(a.resyncGet))
}

func (a *handler) noResyncs(w http.ResponseWriter) bool {
	if a.d.Resyncs != nil {
		return false
	}
	writeJSON(w, http.StatusServiceUnavailable, Error{Error: "this process has no state database: ask a process that runs the reader (or sluice dev)"})
	return true
}

func (a *handler) resyncCreate(w http.ResponseWriter, r *http.Request) {
	if a.noResyncs(w) {
		return
	}
	var req ResyncRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		a.fail(w, errors.Join(ErrBadRequest, err))
		return
	}
	q := r.URL.Query()
	switch {
	case len(body) == 0:
		req.Table, req.Destination = q.Get("table"), q.Get(paramDestination)
		if q.Has(paramValue) {
			v := q.Get(paramValue)
			req.Value = &v
		}
	case q.Has("table") || q.Has(paramDestination) || q.Has(paramValue):
		a.fail(w, errors.Join(ErrBadRequest, errors.New("give the request in the body or in the query, not both")))
		return
	default:
		if err := json.Unmarshal(body, &req); err != nil {
			a.fail(w, errors.Join(ErrBadRequest, fmt.Errorf("decoding the body: %w (want {\"table\": \"SCHEMA.TABLE\"})", err)))
			return
		}
	}
	dest, value, err := a.resyncScope(req)
	if err != nil {
		a.fail(w, err)
		return
	}
	queued, err := a.d.Resyncs.Enqueue(r.Context(), a.d.Config.Source.Slot, req.Table, dest, value, "operator")
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, queued)
}

// resyncScope validates a request: the table is captured, and the
// destination (by name or by value) gives the routing value the resync
// copies the rows of.
func (a *handler) resyncScope(req ResyncRequest) (string, *string, error) {
	if err := proto.ValidateTable(req.Table); err != nil {
		return "", nil, errors.Join(ErrBadRequest, fmt.Errorf("table %q: %w", req.Table, err))
	}
	if !slices.Contains(a.d.Config.Source.Tables, req.Table) {
		return "", nil, errors.Join(ErrBadRequest, fmt.Errorf("table %s is not in source.tables %v", req.Table, a.d.Config.Source.Tables))
	}
	switch {
	case req.Destination != "" && req.Value != nil:
		return "", nil, errors.Join(ErrBadRequest, errors.New("give destination (a destination name) or value (a routing value), not both"))
	case req.Value != nil:
		name, err := a.valueName(*req.Value)
		if err != nil {
			return "", nil, err
		}
		if err := a.oneValue(req.Table, name); err != nil {
			return "", nil, err
		}
		return name, req.Value, nil
	case req.Destination != "":
		if err := checkName(req.Destination); err != nil {
			return "", nil, err
		}
		v, err := a.destinationValue(req.Destination)
		if err != nil {
			return "", nil, err
		}
		if err := a.oneValue(req.Table, req.Destination); err != nil {
			return "", nil, err
		}
		return req.Destination, &v, nil
	}
	return "", nil, nil
}

// oneValue refuses a scoped resync of a destination that destinations.list
// maps more than one routing value to: the resync copies the rows of one
// value, and its clear then removes every row of the destination, so the
// other values' rows would vanish from later snapshots.
func (a *handler) oneValue(table, name string) error {
	dc := a.d.Config.Destinations
	if dc.Mode != "list" {
		return nil
	}
	var values []string
	for v, n := range dc.List {
		if n == name {
			values = append(values, v)
		}
	}
	if len(values) < 2 {
		return nil
	}
	slices.Sort(values)
	return errors.Join(ErrConflict, fmt.Errorf("destination %s holds the rows of %d routing values (%s, destinations.list): a resync of one destination copies one value's rows, so resync the whole table instead (sluice resync --table %s)", name, len(values), strings.Join(values, ", "), table))
}

// destinationValue is the routing value a destination name stands for:
// the reverse of valueName.
func (a *handler) destinationValue(name string) (string, error) {
	dc := a.d.Config.Destinations
	if dc.Mode == "list" {
		for v, n := range dc.List {
			if n == name {
				return v, nil
			}
		}
		return "", errors.Join(ErrNotFound, fmt.Errorf("destination %s is not in destinations.list", name))
	}
	v, err := proto.DecodeDestination(name)
	if err != nil {
		return "", errors.Join(ErrBadRequest, fmt.Errorf("destination %s: %w", name, err))
	}
	return v, nil
}

func (a *handler) resyncList(w http.ResponseWriter, r *http.Request) {
	if a.noResyncs(w) {
		return
	}
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			a.fail(w, errors.Join(ErrBadRequest, fmt.Errorf("limit %q: want 1 to 1000", s)))
			return
		}
		limit = n
	}
	out, err := a.d.Resyncs.List(r.Context(), a.d.Config.Source.Slot, limit)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *handler) resyncGet(w http.ResponseWriter, r *http.Request) {
	if a.noResyncs(w) {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		a.fail(w, errors.Join(ErrBadRequest, fmt.Errorf("resync id %q: want a number", r.PathValue("id"))))
		return
	}
	q, err := a.d.Resyncs.Get(r.Context(), id)
	if errors.Is(err, state.ErrResyncNotFound) {
		a.fail(w, errors.Join(ErrNotFound, err))
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, q)
}
