package api

// Destination lifecycle: pause, resume, drain and retire a destination,
// live (`sluice destinations ...`). The states live in the state database
// (state.DestinationStates); the router and the flusher poll them every
// destinations.state_poll, so a change applies within about a second in
// every process, whichever process served the request.
//
//	GET  /api/v1/destinations/states[?destination=NAME|value=V]
//	                                            every destination not active (or that one)
//	POST /api/v1/destinations/{name}/pause      body {"reason": "..."} optional
//	POST /api/v1/destinations/{name}/resume
//	POST /api/v1/destinations/{name}/drain
//	POST /api/v1/destinations/{name}/retire
//	POST /api/v1/destinations/{action}?destination=NAME|value=V
//	                                            the same, naming it by either parameter (target.go)
//
// {name} in the path is a canonical destination name (never a routing
// value: use value=). 200 {destination, from, to}; 400 on an invalid name,
// an alias or a bad body; 404 for a routing value that names no destination
// (unlisted in mode list, or unroutable); 409 on a refused transition, with
// the reason; a destination that has not been seen yet can be paused ahead
// of time, and retired ahead of time only with ?ahead=true (409 without
// it: a likely typo, and retirement is final). The POSTs pass the request
// guard of every change (guard.go: the bearer token when one is set,
// ClientHeader, no other origin's page), like the dead-letter endpoints.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/state"
)

// LifecycleChange is the body of a successful lifecycle POST.
type LifecycleChange struct {
	Destination string                 `json:"destination"`
	From        state.DestinationState `json:"from"`
	To          state.DestinationState `json:"to"`
}

// LifecycleRequest is the optional body of a lifecycle POST.
type LifecycleRequest struct {
	Reason string `json:"reason,omitempty"`
}

// lifecycleActions maps a POST's action to the state it sets.
var lifecycleActions = map[string]state.DestinationState{
	"pause":  state.Paused,
	"resume": state.Active,
	"drain":  state.Draining,
	"retire": state.Retired,
}

const maxReason = 1024

// paramAhead=true retires a destination never seen (no cursor, no state
// row): without it that is refused, as a likely typo that would drop a
// tenant's future rows for good.
const paramAhead = "ahead"

// readReason reads an optional {"reason": "..."} body (at most 64 KiB, the
// reason at most maxReason bytes) into reason: the body of a lifecycle
// POST and of a pin. An empty body is no reason.
func readReason(r *http.Request, reason *string) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return errors.Join(ErrBadRequest, fmt.Errorf("reading the body: %w", err))
	}
	if len(body) > 0 {
		var req struct {
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return errors.Join(ErrBadRequest, fmt.Errorf("decoding the body (want {\"reason\": \"...\"}): %w", err))
		}
		*reason = req.Reason
	}
	if len(*reason) > maxReason {
		return errors.Join(ErrBadRequest, fmt.Errorf("reason is %d bytes, at most %d", len(*reason), maxReason))
	}
	return nil
}

func registerLifecycle(h *httpx.Server, a *handler) {
	h.Handle("GET /api/v1/destinations/states", http.HandlerFunc(a.lifecycleStates))
	h.Handle("GET /api/v1/destinations/list", http.HandlerFunc(a.knownDestinations))
	for action, to := range lifecycleActions {
		what := "to " + action + " a destination"
		h.Handle("POST /api/v1/destinations/{name}/"+action, changes(what, func(w http.ResponseWriter, r *http.Request) {
			a.lifecycleSet(w, r, to, a.pathTarget)
		}))
		h.Handle("POST /api/v1/destinations/"+action, changes(what, func(w http.ResponseWriter, r *http.Request) {
			a.lifecycleSet(w, r, to, func(r *http.Request) (string, error) { return a.target(r.URL.Query()) })
		}))
	}
}

func (a *handler) noStates(w http.ResponseWriter) bool {
	if a.d.States != nil {
		return false
	}
	writeJSON(w, http.StatusServiceUnavailable, Error{Error: "this process has no state database: ask a process that runs the router, the flusher or the reader (or sluice dev)"})
	return true
}

// pathTarget reads {name} from the path: a canonical destination name. A
// destination= or value= beside it would name a second one: 400.
func (a *handler) pathTarget(r *http.Request) (string, error) {
	q := r.URL.Query()
	if q.Has(paramDestination) || q.Has(paramValue) {
		return "", errors.Join(ErrBadRequest, errors.New("the path names the destination: do not also give destination= or value="))
	}
	name := r.PathValue("name")
	return name, checkName(name)
}

func (a *handler) lifecycleStates(w http.ResponseWriter, r *http.Request) {
	if a.noStates(w) {
		return
	}
	only, filtered, err := a.optionalTarget(r.URL.Query())
	if err != nil {
		a.fail(w, err)
		return
	}
	rows, _, err := a.d.States.Load(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	out := make([]state.DestinationStateRow, 0, len(rows))
	for _, row := range rows {
		if row.State != state.Active && (!filtered || row.Destination == only) {
			out = append(out, row)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *handler) lifecycleSet(w http.ResponseWriter, r *http.Request, to state.DestinationState, target func(*http.Request) (string, error)) {
	if a.noStates(w) {
		return
	}
	name, err := target(r)
	if err != nil {
		a.fail(w, err)
		return
	}
	var req LifecycleRequest
	if err := readReason(r, &req.Reason); err != nil {
		a.fail(w, err)
		return
	}
	if to == state.Retired && r.URL.Query().Get(paramAhead) != "true" {
		known, _, err := a.d.States.List(r.Context(), state.ListOptions{Name: name, Limit: 1})
		if err != nil {
			a.fail(w, err)
			return
		}
		if len(known) == 0 {
			writeJSON(w, http.StatusConflict, Error{Error: fmt.Sprintf("destination %s was never seen (no pack flushed for it, no state set): retiring it drops every row it would ever get, and retirement is final; check the name, or, to retire it ahead of its first change, ask again with %s=true (sluice destinations retire --ahead)", name, paramAhead)})
			return
		}
	}
	from, err := a.d.States.Set(r.Context(), name, to, req.Reason)
	switch {
	case state.IsRefused(err):
		writeJSON(w, http.StatusConflict, Error{Error: err.Error()})
		return
	case errors.Is(err, state.ErrBadArgument):
		a.fail(w, errors.Join(ErrBadRequest, err))
		return
	case err != nil:
		a.fail(w, err)
		return
	}
	a.d.Log.Info("destination state set", "destination", name, "from", string(from), "to", string(to), "reason", req.Reason)
	writeJSON(w, http.StatusOK, LifecycleChange{Destination: name, From: from, To: to})
}
