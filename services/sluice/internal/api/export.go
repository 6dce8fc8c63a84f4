package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/sluice/internal/export"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/httpx"
)

// Exports is what GET /api/v1/export and /api/v1/tables need beyond Reads:
// a table's columns and the tables a destination holds at a snapshot.
type Exports interface {
	Columns(ctx context.Context, table string) ([]export.Column, error)
	Tables(ctx context.Context, destination string, snapshot uint64) ([]string, error)
}

// Export response headers: the snapshot the file holds, and (a trailer,
// sent only when the whole file was written) its row count. A client that
// gets no row-count trailer got a truncated file.
const (
	HeaderSnapshot   = "X-Sluice-Snapshot"
	TrailerRowsTotal = "X-Sluice-Export-Rows"
)

// TablesPage is the body of GET /api/v1/tables.
type TablesPage struct {
	Snapshot    uint64   `json:"snapshot"`
	Destination string   `json:"destination"`
	Tables      []string `json:"tables"`
}

// exportPageRows is how many rows the export reads per catalog page.
const exportPageRows = 5000

func registerExport(h *httpx.Server, a *handler) {
	h.Handle("GET /api/v1/export", http.HandlerFunc(a.export))
	h.Handle("GET /api/v1/tables", http.HandlerFunc(a.tables))
	h.Handle("GET /api/v1/packs", http.HandlerFunc(a.packs))
}

func (a *handler) exports() (Exports, error) {
	e, ok := a.d.Reads.(Exports)
	if a.d.Reads == nil || !ok {
		return nil, errors.New("this process has no catalog: ask the process running the indexer/publisher or sluice dev")
	}
	return e, nil
}

// snapshotParam reads snapshot= (0 when absent) and resolves 0 to the latest.
func (a *handler) snapshotParam(ctx context.Context, v string) (uint64, error) {
	if v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return 0, errors.Join(ErrBadRequest, errors.New("snapshot must be a version number"))
		}
		return n, nil
	}
	page, err := a.d.Reads.Snapshots(ctx, SnapshotsQuery{Limit: 1}) // the newest
	if err != nil {
		return 0, err
	}
	if len(page.Snapshots) == 0 {
		return 0, errors.Join(ErrNotFound, errors.New("no snapshot has been published yet"))
	}
	return page.Snapshots[len(page.Snapshots)-1].Version, nil
}

func (a *handler) tables(w http.ResponseWriter, r *http.Request) {
	ex, err := a.exports()
	if err != nil {
		a.fail(w, err)
		return
	}
	q := r.URL.Query()
	dest, err := a.target(q)
	if err != nil {
		a.fail(w, err)
		return
	}
	v, err := a.snapshotParam(r.Context(), q.Get("snapshot"))
	if err != nil {
		a.fail(w, err)
		return
	}
	ts, err := ex.Tables(r.Context(), dest, v)
	if err != nil {
		a.fail(w, err)
		return
	}
	if ts == nil {
		ts = []string{}
	}
	writeJSON(w, http.StatusOK, TablesPage{Snapshot: v, Destination: dest, Tables: ts})
}

// export streams one table of a destination at a snapshot as a file. The
// first page is read before anything is written, so an unknown table,
// destination or snapshot is an error status; a failure later ends the
// body without the row-count trailer.
func (a *handler) export(w http.ResponseWriter, r *http.Request) {
	ex, err := a.exports()
	if err != nil {
		a.fail(w, err)
		return
	}
	ctx := r.Context()
	q := r.URL.Query()
	dest, err := a.target(q)
	if err != nil {
		a.fail(w, err)
		return
	}
	table := q.Get("table")
	if err := proto.ValidateTable(table); err != nil {
		a.fail(w, errors.Join(ErrBadRequest, err))
		return
	}
	format, err := export.ParseFormat(q.Get("format"))
	if err != nil {
		a.fail(w, errors.Join(ErrBadRequest, err))
		return
	}
	v, err := a.snapshotParam(ctx, q.Get("snapshot"))
	if err != nil {
		a.fail(w, err)
		return
	}
	done, err := a.reads.enter(ctx)
	if err != nil {
		a.fail(w, err)
		return
	}
	defer done()
	read := func(ctx context.Context, after string) (export.Page, error) {
		p, err := a.d.Reads.Rows(ctx, RowsQuery{Destination: dest, Table: table, Snapshot: v, After: after, Limit: exportPageRows})
		return export.Page{Rows: p.Rows, Next: p.Next}, err
	}
	first, err := read(ctx, "")
	if err != nil {
		a.fail(w, err)
		return
	}
	known, err := ex.Columns(ctx, table)
	if err != nil {
		a.fail(w, err)
		return
	}
	var row0 []byte
	if len(first.Rows) > 0 {
		row0 = first.Rows[0]
	}
	cols, err := export.ColumnsOf(row0, known)
	if err != nil {
		a.fail(w, err)
		return
	}
	pages := func(ctx context.Context, after string) (export.Page, error) {
		if after == "" {
			return first, nil
		}
		return read(ctx, after)
	}
	h := w.Header()
	h.Set("Content-Type", format.ContentType())
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", export.FileName(table, format)))
	h.Set(HeaderSnapshot, strconv.FormatUint(v, 10))
	h.Set("Trailer", TrailerRowsTotal)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	n, err := export.Write(ctx, w, format, cols, pages, nil)
	if err != nil {
		if ctx.Err() == nil {
			a.d.Log.Warn("export failed", "destination", dest, "table", table, "snapshot", v, "rows", n, "err", err)
		}
		return
	}
	h.Set(TrailerRowsTotal, strconv.FormatInt(n, 10))
}

// Packs is what GET /api/v1/packs needs: a destination's newest packs.
type Packs interface {
	RecentPacks(ctx context.Context, destination string, limit int) ([]catalog.PackInfo, error)
}

// PacksPage is the body of GET /api/v1/packs: a destination's newest
// indexed packs, newest first, the Jaeger UI their traces open in ("" when
// telemetry.jaeger_ui is not set), and whether this process's own trace
// view (/ui?trace=ID, traces.go) can show them: a Jaeger query API is
// configured (telemetry.jaeger_query or telemetry.jaeger_ui).
type PacksPage struct {
	Destination string             `json:"destination"`
	Packs       []catalog.PackInfo `json:"packs"`
	JaegerUI    string             `json:"jaeger_ui,omitempty"`
	TraceView   bool               `json:"trace_view"`
}

func (a *handler) packs(w http.ResponseWriter, r *http.Request) {
	p, ok := a.d.Reads.(Packs)
	if a.d.Reads == nil || !ok {
		a.fail(w, errors.New("this process has no catalog"))
		return
	}
	q := r.URL.Query()
	dest, err := a.target(q)
	if err != nil {
		a.fail(w, err)
		return
	}
	limit, err := parseBound(q.Get("limit"), 10, 1, 1000, "limit")
	if err != nil {
		a.fail(w, err)
		return
	}
	packs, err := p.RecentPacks(r.Context(), dest, limit)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, PacksPage{Destination: dest, Packs: packs, JaegerUI: a.d.Config.Telemetry.JaegerUI,
		TraceView: a.d.Config.Telemetry.QueryURL() != ""})
}
