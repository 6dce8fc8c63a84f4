package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
)

// slowReads holds every Rows call until release is closed: a read slower
// than the others, which a real catalog does not produce on demand (the
// only fake here; the cap under test is the API's own).
type slowReads struct {
	Reads
	started chan struct{}
	release chan struct{}
}

func (s slowReads) Rows(ctx context.Context, q RowsQuery) (RowsPage, error) {
	s.started <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return RowsPage{}, ctx.Err()
	}
	return RowsPage{Snapshot: 1}, nil
}

// Changes holds like Rows: a page of the change feed takes a slot too.
func (s slowReads) Changes(ctx context.Context, q ChangesQuery) (ChangesPage, error) {
	if _, err := s.Rows(ctx, RowsQuery{}); err != nil {
		return ChangesPage{}, err
	}
	return ChangesPage{From: q.From, To: 1}, nil
}

// TestReadCapHTTP: with http.max_reads reads in progress, one more waits
// http.read_queue_wait and is answered 503 with Retry-After and the key to
// raise; a slot given back serves the next. Its control: a cap of two
// serves the second read at once.
func TestReadCapHTTP(t *testing.T) {
	for _, tc := range []struct {
		max  int
		want int
	}{{1, http.StatusServiceUnavailable}, {2, http.StatusOK}} {
		reads := slowReads{started: make(chan struct{}, 4), release: make(chan struct{})}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
		cfg := config.Default()
		cfg.HTTP.MaxReads, cfg.HTTP.ReadQueueWait = tc.max, 200*time.Millisecond
		Register(h, Deps{Log: log, Reads: reads, Config: cfg})
		srv := httptest.NewServer(h.Handler())
		// The first read is a rows page, the second a page of changes:
		// both take a slot of the one cap.
		get := func(path string) (*http.Response, string) {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp, string(b)
		}
		first := make(chan int, 1)
		go func() { r, _ := get("/api/v1/rows?destination=shop1&table=public.items"); first <- r.StatusCode }()
		<-reads.started
		if tc.want == http.StatusOK {
			// The second read runs beside the first: once it has
			// started, let both through.
			go func() { <-reads.started; close(reads.release) }()
		}
		resp, body := get("/api/v1/changes?destination=shop1&table=public.items&from=1")
		if resp.StatusCode != tc.want {
			t.Fatalf("max_reads %d: second read answered %d %s, want %d", tc.max, resp.StatusCode, body, tc.want)
		}
		if tc.want == http.StatusServiceUnavailable && (resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, "http.max_reads")) {
			t.Fatalf("refused read: Retry-After %q, body %s", resp.Header.Get("Retry-After"), body)
		}
		if tc.want != http.StatusOK {
			close(reads.release)
		}
		if code := <-first; code != http.StatusOK {
			t.Fatalf("max_reads %d: first read answered %d", tc.max, code)
		}
		if resp, body := get("/api/v1/changes?destination=shop1&table=public.items&from=1"); resp.StatusCode != http.StatusOK {
			t.Fatalf("max_reads %d: a read after the slot came back answered %d %s", tc.max, resp.StatusCode, body)
		}
		srv.Close()
	}
}
