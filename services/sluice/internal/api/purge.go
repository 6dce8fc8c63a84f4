package api

// Tenant erasure (catalog purge.go):
//
//	POST /api/v1/destinations/{name}/purge   ask the active publisher to purge a retired destination
//	GET  /api/v1/destinations/{name}/purge   what remains of it, and the request's state
//
// The POST needs ClientHeader (and the bearer token when one is set), the
// state database (to check that the destination is retired) and the
// catalog: 202 with the status; 409 when the destination is not retired,
// or when a pinned snapshot holds it (the error names the pin). The
// active publisher runs the purge on its next lifecycle tick; `sluice
// destinations purge` polls the GET until Done.

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/state"
)

// Purges is what the purge endpoints need beyond Reads.
type Purges interface {
	RequestPurge(ctx context.Context, destination string) error
	PurgeStatus(ctx context.Context, destination string) (PurgeStatus, error)
}

// PurgeStatus is the body of the purge endpoints.
type PurgeStatus struct {
	catalog.PurgeStatus
	// Request is the purge request's state: requested, done or failed
	// ("" when none was made), with the failure's message.
	Request string `json:"request,omitempty"`
	Message string `json:"message,omitempty"`
}

// RequestPurge implements Purges.
func (r CatalogReads) RequestPurge(ctx context.Context, destination string) error {
	return r.C.RequestPurge(ctx, destination)
}

// PurgeStatus implements Purges.
func (r CatalogReads) PurgeStatus(ctx context.Context, destination string) (PurgeStatus, error) {
	st, err := r.C.PurgeStatus(ctx, destination)
	if err != nil {
		return PurgeStatus{}, err
	}
	out := PurgeStatus{PurgeStatus: st}
	reqs, err := r.C.PurgeRequests(ctx, destination)
	if err != nil {
		return PurgeStatus{}, err
	}
	if len(reqs) == 1 {
		out.Request, out.Message = reqs[0].State, reqs[0].Message
	}
	return out, nil
}

func registerPurge(h *httpx.Server, a *handler) {
	h.Handle("POST /api/v1/destinations/{name}/purge", http.HandlerFunc(a.purge))
	h.Handle("GET /api/v1/destinations/{name}/purge", http.HandlerFunc(a.purgeStatus))
}

func (a *handler) purges(w http.ResponseWriter) (Purges, bool) {
	p, ok := a.d.Reads.(Purges)
	if !ok {
		writeJSON(w, http.StatusServiceUnavailable, Error{Error: "this process has no catalog: ask a process that runs the indexer or the publisher (or sluice dev)"})
	}
	return p, ok
}

func (a *handler) purge(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(ClientHeader) == "" {
		writeJSON(w, http.StatusForbidden, Error{Error: "send the " + ClientHeader + " header (the sluice CLI does) to purge a destination"})
		return
	}
	p, ok := a.purges(w)
	if !ok || a.noStates(w) {
		return
	}
	name, err := a.pathTarget(r)
	if err != nil {
		a.fail(w, err)
		return
	}
	rows, _, err := a.d.States.Load(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	cur := state.Active
	for _, row := range rows {
		if row.Destination == name {
			cur = row.State
		}
	}
	if cur != state.Retired {
		writeJSON(w, http.StatusConflict, Error{Error: fmt.Sprintf("destination %s is %s, not retired: only a retired destination can be purged (sluice destinations retire %s)", name, cur, name)})
		return
	}
	switch err := p.RequestPurge(r.Context(), name); {
	case errors.Is(err, catalog.ErrPurgePinned):
		writeJSON(w, http.StatusConflict, Error{Error: err.Error()})
		return
	case err != nil:
		a.fail(w, err)
		return
	}
	a.d.Log.Info("destination purge requested", "destination", name)
	st, err := p.PurgeStatus(r.Context(), name)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, st)
}

func (a *handler) purgeStatus(w http.ResponseWriter, r *http.Request) {
	p, ok := a.purges(w)
	if !ok {
		return
	}
	name, err := a.pathTarget(r)
	if err != nil {
		a.fail(w, err)
		return
	}
	st, err := p.PurgeStatus(r.Context(), name)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
