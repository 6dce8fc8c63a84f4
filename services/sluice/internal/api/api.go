package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/state"
)

// Reads is what the API needs from the catalog.
type Reads interface {
	// Snapshots returns one page of the retained snapshots (snapshots.go).
	Snapshots(ctx context.Context, q SnapshotsQuery) (SnapshotsPage, error)
	Rows(ctx context.Context, q RowsQuery) (RowsPage, error)
	Pin(ctx context.Context, version uint64, reason string) (Pin, error)
	Unpin(ctx context.Context, version uint64) error
}

// RowsQuery asks for one page of a destination's table.
type RowsQuery struct {
	Destination   string
	Table         string
	Snapshot      uint64 // 0: the latest published
	After         string // opaque cursor from the previous page
	Limit         int
	SystemColumns bool
}

// ErrNotFound is returned by Reads for an unknown snapshot, table or
// destination; the API answers 404.
var ErrNotFound = errors.New("not found")

// ErrBadRequest wraps a caller mistake; the API answers 400.
var ErrBadRequest = errors.New("bad request")

// ErrConflict wraps a request the current configuration or state cannot
// carry out as asked; the API answers 409.
var ErrConflict = errors.New("conflict")

// Deps is what the API serves from.
type Deps struct {
	Reads    Reads // nil in processes without a catalog
	JS       jetstream.JetStream
	Config   config.Config
	Statuses map[string]func() any
	// Summaries are cheap statuses of the same components, for the
	// series sampler (stack.Component.Summary); nil: Statuses.
	Summaries map[string]func() any
	Log       *slog.Logger
	// States are the destination lifecycle states (lifecycle.go); nil in
	// a process without the state database.
	States *state.DestinationStates
	// Resyncs is the live resync queue (resyncs.go); nil in a process
	// without the state database.
	Resyncs *state.Resyncs
	// Halts is the ledger that keeps the halts of dead-lettered packs
	// past their dead letters (halts.go); nil in a process without the
	// state database (halts are then read from the DLQ alone).
	Halts *state.HaltLedger
	// Links name the embedded NATS server, its monitoring and Jaeger.
	Links Links
	// Tokens are the tenant tokens (tokens.go); nil in a process without
	// the state database: then only the operator token is accepted.
	Tokens *state.Tokens
}

// Register mounts the API and the UI on h. It returns the sampler behind
// GET /api/v1/series, which the caller runs (Series.Run) for as long as it
// serves.
func Register(h *httpx.Server, d Deps) *Series {
	a := &handler{d: d, halts: &haltCache{}, reads: newReadCap(d.Config.HTTP.MaxReads, d.Config.HTTP.ReadQueueWait), operatorToken: h.HasToken()}
	if d.Tokens != nil {
		h.SetTenants(httpx.Tenants{Prefix: state.TokenPrefix, Verify: verifyTenant(d.Tokens), Allow: a.allowTenant})
	}
	h.Handle("GET /api/v1/status", http.HandlerFunc(a.status))
	registerSnapshots(h, a)
	h.Handle("GET /api/v1/rows", http.HandlerFunc(a.rows))
	registerChanges(h, a)
	h.Handle("GET /ui", http.HandlerFunc(a.ui))
	h.Handle("GET /ui/actions.js", http.HandlerFunc(a.uiActions))
	h.Handle("GET /api/v1/links", http.HandlerFunc(a.links))
	h.Handle("GET /{$}", http.RedirectHandler("/ui", http.StatusFound))
	registerDestinations(h, a)
	RegisterDLQ(h, d)
	registerLifecycle(h, a)
	registerPurge(h, a)
	registerExport(h, a)
	registerResyncs(h, a)
	registerTraces(h, a)
	registerTokens(h, a)
	sampled := d.Summaries
	if sampled == nil {
		sampled = d.Statuses
	}
	series := NewSeries(sampled, 0)
	if d.Halts != nil {
		series.keepHalts = func(ctx context.Context) {
			if _, err := a.packHalts(ctx); err != nil && ctx.Err() == nil {
				d.Log.Warn("recording the halts of dead-lettered packs", "err", err)
			}
		}
	}
	h.Handle("GET /api/v1/series", http.HandlerFunc(series.serve))
	return series
}

type handler struct {
	d Deps
	// halts caches the halts of dead-lettered packs (halts.go).
	halts *haltCache
	// reads caps the row reads served at once (readcap.go).
	reads *readCap
	// operatorToken: the server requires one (tenant tokens need it).
	operatorToken bool
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (a *handler) fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrBadRequest):
		code = http.StatusBadRequest
	case errors.Is(err, ErrConflict):
		code = http.StatusConflict
	case errors.Is(err, ErrGone):
		code = http.StatusGone
	case errors.Is(err, ErrBusy):
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		code = http.StatusServiceUnavailable
	default:
		a.d.Log.Warn("api request failed", "err", err)
	}
	writeJSON(w, code, Error{Error: err.Error()})
}

// Status is the body of /api/v1/status.
type Status struct {
	Services map[string]any `json:"services"`
	Snapshot *Snapshot      `json:"snapshot,omitempty"`
	Streams  []StreamStatus `json:"streams"`
	// HaltedPacks are the packs and segments the indexer dead-lettered,
	// each halting its destinations until cured (halts.go); in the halts
	// view too.
	HaltedPacks []PackHalt `json:"halted_packs,omitempty"`
	// HaltsError says why the halted packs could not be read: a halt check
	// must not say yes on it.
	HaltsError string    `json:"halts_error,omitempty"`
	Time       time.Time `json:"time"`
}

// StreamStatus is one JetStream stream with its consumers.
type StreamStatus struct {
	Name      string           `json:"name"`
	Messages  uint64           `json:"messages"`
	Bytes     uint64           `json:"bytes"`
	LastSeq   uint64           `json:"last_seq"`
	Consumers []ConsumerStatus `json:"consumers"`
	// Error is set when the stream does not answer (natsx.ErrJetStreamUnavailable:
	// on a NATS cluster, no quorum or no leader for the stream).
	Error string `json:"error,omitempty"`
}

// ConsumerStatus is one durable consumer's lag.
type ConsumerStatus struct {
	Name        string `json:"name"`
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ack_pending"`
	AckFloor    uint64 `json:"ack_floor"`
	Redelivered int    `json:"redelivered"`
}

func (a *handler) status(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	s := Status{Services: map[string]any{}, Time: time.Now().UTC()}
	switch v := r.URL.Query().Get("view"); v {
	case "":
	case "halts":
		// Only what a halt check needs (`sluice wait` polls it): every
		// service's summary (a flusher's lists its halted destinations
		// alone), no snapshot, no streams.
		for name, f := range a.d.Statuses {
			if sf, ok := a.d.Summaries[name]; ok {
				f = sf
			}
			s.Services[name] = f()
		}
		s.HaltedPacks, s.HaltsError = a.haltedPacks(ctx)
		writeJSON(w, http.StatusOK, s)
		return
	default:
		a.fail(w, errors.Join(ErrBadRequest, fmt.Errorf("view %q: want halts, or none for the full status", v)))
		return
	}
	for name, f := range a.d.Statuses {
		s.Services[name] = f()
	}
	if a.d.Reads != nil {
		if snap, err := a.newest(r.WithContext(ctx)); err == nil {
			s.Snapshot = snap
		}
	}
	s.Streams = a.streams(ctx)
	s.HaltedPacks, s.HaltsError = a.haltedPacks(ctx)
	writeJSON(w, http.StatusOK, s)
}

func (a *handler) haltedPacks(ctx context.Context) ([]PackHalt, string) {
	hs, err := a.packHalts(ctx)
	if err != nil {
		return nil, err.Error()
	}
	return hs, ""
}

func (a *handler) streams(ctx context.Context) []StreamStatus {
	var out []StreamStatus
	for _, name := range natsx.Streams {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ss, ok := a.stream(sctx, name)
		cancel()
		if ok {
			out = append(out, ss)
		}
	}
	return out
}

// stream is one stream's status: its error when it does not answer, not
// ok when it does not exist.
func (a *handler) stream(ctx context.Context, name string) (StreamStatus, bool) {
	info, err := natsx.StreamAvailable(ctx, a.d.JS, name)
	if err != nil {
		return StreamStatus{Name: name, Error: err.Error()}, errors.Is(err, natsx.ErrJetStreamUnavailable)
	}
	ss := StreamStatus{Name: name, Messages: info.State.Msgs, Bytes: info.State.Bytes, LastSeq: info.State.LastSeq}
	st, err := a.d.JS.Stream(ctx, name)
	if err != nil {
		ss.Error = err.Error()
		return ss, true
	}
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		ss.Consumers = append(ss.Consumers, ConsumerStatus{
			Name: ci.Name, Pending: ci.NumPending, AckPending: ci.NumAckPending,
			AckFloor: ci.AckFloor.Stream, Redelivered: ci.NumRedelivered,
		})
	}
	sort.Slice(ss.Consumers, func(i, j int) bool { return ss.Consumers[i].Name < ss.Consumers[j].Name })
	return ss, true
}

func (a *handler) rows(w http.ResponseWriter, r *http.Request) {
	if a.d.Reads == nil {
		a.fail(w, errors.New("this process has no catalog"))
		return
	}
	q := r.URL.Query()
	rq := RowsQuery{Table: q.Get("table"), After: q.Get("after"), Limit: 1000}
	dest, err := a.target(q)
	if err != nil {
		a.fail(w, err)
		return
	}
	rq.Destination = dest
	if err := proto.ValidateTable(rq.Table); err != nil {
		a.fail(w, errors.Join(ErrBadRequest, err))
		return
	}
	if v := q.Get("snapshot"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			a.fail(w, errors.Join(ErrBadRequest, errors.New("snapshot must be a version number")))
			return
		}
		rq.Snapshot = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100000 {
			a.fail(w, errors.Join(ErrBadRequest, errors.New("limit must be between 1 and 100000")))
			return
		}
		rq.Limit = n
	}
	rq.SystemColumns = q.Get("system_columns") == "true"
	done, err := a.reads.enter(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	page, err := a.d.Reads.Rows(r.Context(), rq)
	done()
	if err != nil {
		a.fail(w, err)
		return
	}
	if page.Rows == nil {
		page.Rows = []json.RawMessage{}
	}
	writeJSON(w, http.StatusOK, page)
}
