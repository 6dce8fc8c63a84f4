package api

// Tenant erasure (catalog purge.go; the request also erases the
// destination's dead letters, eraseDeadLetters):
//
//	POST /api/v1/destinations/{name}/purge   ask the active publisher to purge a retired destination
//	GET  /api/v1/destinations/{name}/purge   what remains of it, and the request's state
//
// The POST passes the request guard of every change (guard.go) and needs the
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
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/natsx"

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
	// Remains are what the purge of the catalog and the packs leaves that
	// still holds the destination's rows or its name, each with when it
	// goes (remains).
	Remains []Remaining `json:"remains,omitempty"`
	// DeadLettersErased is how many of its dead letters the request
	// erased from the DLQ (the POST's answer only).
	DeadLettersErased int `json:"dead_letters_erased,omitempty"`
}

// Remaining is one place a purged destination's rows or name still are.
type Remaining struct {
	What  string     `json:"what"`
	Count int        `json:"count,omitempty"`
	Until *time.Time `json:"until,omitempty"` // when the last of it goes by itself; absent: it stays
	How   string     `json:"how"`             // what removes it sooner, or why it stays
}

// remains lists what outlives the purge of destination name: its dead
// letters (counted from their Sluice-Destination header, at most
// maxHaltScan read; the purge request erases them, so any here came
// after it or its erasure failed; a segment's dead letter names no one
// destination and is not counted), its claim-check objects, and its state
// rows.
func (a *handler) remains(ctx context.Context, name string) []Remaining {
	var out []Remaining
	if a.d.JS != nil {
		if stream, err := a.d.JS.Stream(ctx, proto.StreamDLQ); err == nil {
			if info, err := stream.Info(ctx); err == nil && info.State.Msgs > 0 {
				n, last := 0, time.Time{}
				_ = natsx.ScanStream(ctx, stream, proto.SubjectDLQAll, int(min(info.State.Msgs, maxHaltScan)), time.Second, func(_ uint64, at time.Time, m jetstream.Msg) {
					if m.Headers().Get(proto.HeaderDestination) == name {
						n++
						if at.After(last) {
							last = at
						}
					}
				})
				if n > 0 {
					until := last.Add(info.Config.MaxAge)
					out = append(out, Remaining{What: "dead letters (they hold its rows)", Count: n, Until: &until,
						How: "sluice dlq list shows them (their sequences), sluice dlq purge --seq N removes one now; the DLQ drops each one its max age after it was written"})
				}
			}
		}
	}
	grace := a.d.Config.Catalog.EffectiveClaimsGrace(a.d.Config.NATS)
	until := time.Now().Add(grace)
	out = append(out, Remaining{What: "claim-check objects of its large values (" + proto.ClaimsDir + "/ in the pack store), if any", Until: &until,
		How: "claim collection deletes each once it is past the frontier and older than catalog.claims_grace (" + grace.String() + ")"})
	out = append(out, Remaining{What: "its name in the state database (" + a.d.Config.State.Schema + ".destination_states, retired, and its cursor in " + a.d.Config.State.Schema + ".cursors)",
		How: "kept: the retired state is what makes the router drop the rows the source still sends for it"})
	return out
}

// eraseDeadLetters removes from the DLQ every dead letter whose
// Sluice-Destination header names destination (a router's or indexer's
// dead letter of its rows or its pack), overwriting each on disk
// (SecureDeleteMsg): they hold its rows, and its erasure must not wait for
// the DLQ's max age. A dead letter naming several destinations (a segment)
// has no such header and stays: it holds the others' halts. It returns how
// many it erased.
func (a *handler) eraseDeadLetters(ctx context.Context, destination string) (int, error) {
	if a.d.JS == nil {
		return 0, nil
	}
	stream, err := a.d.JS.Stream(ctx, proto.StreamDLQ)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("opening stream %s: %w", proto.StreamDLQ, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", proto.StreamDLQ, err)
	}
	if info.State.Msgs == 0 {
		return 0, nil
	}
	var seqs []uint64
	if err := natsx.ScanStream(ctx, stream, proto.SubjectDLQAll, int(info.State.Msgs), time.Second, func(seq uint64, _ time.Time, m jetstream.Msg) {
		if m.Headers().Get(proto.HeaderDestination) == destination {
			seqs = append(seqs, seq)
		}
	}); err != nil {
		return 0, fmt.Errorf("scanning stream %s: %w", proto.StreamDLQ, err)
	}
	for i, seq := range seqs {
		if err := stream.SecureDeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return i, fmt.Errorf("erasing dead letter %d: %w", seq, err)
		}
	}
	if a.d.Halts != nil {
		// Their halts go with them: the destination is retired and erased.
		if err := a.d.Halts.End(ctx, seqs...); err != nil {
			return len(seqs), err
		}
	}
	return len(seqs), nil
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
	h.Handle("POST /api/v1/destinations/{name}/purge", changes("to purge a destination", a.purge))
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
	erased, err := a.eraseDeadLetters(r.Context(), name)
	if err != nil {
		a.fail(w, fmt.Errorf("the purge is requested, but erasing the dead letters of %s failed after %d (ask again to finish): %w", name, erased, err))
		return
	}
	a.d.Log.Info("destination purge requested", "destination", name, "dead_letters_erased", erased)
	st, err := p.PurgeStatus(r.Context(), name)
	if err != nil {
		a.fail(w, err)
		return
	}
	st.Remains, st.DeadLettersErased = a.remains(r.Context(), name), erased
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
	st.Remains = a.remains(r.Context(), name)
	writeJSON(w, http.StatusOK, st)
}
