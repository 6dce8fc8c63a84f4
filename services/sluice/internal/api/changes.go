package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/httpx"
)

// Changes is what GET /api/v1/changes needs beyond Reads: the change feed
// of a destination's table between two snapshots (docs/adr/0046).
type Changes interface {
	Changes(ctx context.Context, q ChangesQuery) (ChangesPage, error)
}

// ChangesQuery asks for one page of the changes of a destination's table
// from snapshot From to snapshot To.
type ChangesQuery struct {
	Destination string
	Table       string
	From        uint64
	To          uint64 // 0: the latest published
	After       string // opaque cursor from the previous page
	Limit       int
}

// ChangesPage is the body of GET /api/v1/changes: the catalog's page
// (catalog.ChangesPage) as is.
type ChangesPage = catalog.ChangesPage

func registerChanges(h *httpx.Server, a *handler) {
	h.Handle("GET /api/v1/changes", http.HandlerFunc(a.changes))
}

// changes serves one page of the change feed, behind the read cap like a
// rows page. A paged reader passes the first page's to= on the next ones.
func (a *handler) changes(w http.ResponseWriter, r *http.Request) {
	ch, ok := a.d.Reads.(Changes)
	if a.d.Reads == nil || !ok {
		a.fail(w, errors.New("this process has no catalog: ask the process running the indexer/publisher or sluice dev"))
		return
	}
	q := r.URL.Query()
	cq := ChangesQuery{Table: q.Get("table"), After: q.Get("after"), Limit: 1000}
	dest, err := a.target(q)
	if err != nil {
		a.fail(w, err)
		return
	}
	cq.Destination = dest
	if err := proto.ValidateTable(cq.Table); err != nil {
		a.fail(w, errors.Join(ErrBadRequest, err))
		return
	}
	version := func(name string, required bool) (uint64, bool) {
		v := q.Get(name)
		if v == "" && !required {
			return 0, true
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			a.fail(w, errors.Join(ErrBadRequest, errors.New(name+" must be a snapshot version")))
			return 0, false
		}
		return n, true
	}
	if cq.From, ok = version("from", true); !ok {
		return
	}
	if cq.To, ok = version("to", false); !ok {
		return
	}
	if cq.To != 0 && cq.From > cq.To {
		a.fail(w, errors.Join(ErrBadRequest, errors.New("from must not be after to")))
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100000 {
			a.fail(w, errors.Join(ErrBadRequest, errors.New("limit must be between 1 and 100000")))
			return
		}
		cq.Limit = n
	}
	done, err := a.reads.enter(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	page, err := ch.Changes(r.Context(), cq)
	done()
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}
