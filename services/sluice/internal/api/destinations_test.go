package api

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/services/flusher"
)

var fakeStates = []string{"healthy", "buffering", "flushing", "lagging", "halted"}

// fakeFlusher is the API's input, not a component: a flusher status with n
// destinations in shuffled order (the API must sort them).
func fakeFlusher(n int) flusher.Status {
	st := flusher.Status{ID: "fake", States: map[string]int{}}
	for i := range n {
		d := flusher.DestinationStatus{
			Destination: fmt.Sprintf("tenant_%05d", i), Partition: i % 8, State: fakeStates[i%len(fakeStates)],
			BufferedRows: int64(i), BufferedBytes: int64(i) * 100, Cursor: fmt.Sprintf("0/%X:%d", i, i%3),
			LastPack: fmt.Sprintf("pack-%d", i), AgeSeconds: float64(i) / 10,
		}
		if d.State == "halted" {
			d.LastError = "schema rejected for " + d.Destination
		}
		st.States[d.State]++
		st.Destinations = append(st.Destinations, d)
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(st.Destinations), func(i, j int) {
		st.Destinations[i], st.Destinations[j] = st.Destinations[j], st.Destinations[i]
	})
	return st
}

func getDestinations(t *testing.T, a *handler, query string) (DestinationsPage, int, int) {
	t.Helper()
	rec := httptest.NewRecorder()
	a.destinations(rec, httptest.NewRequest(http.MethodGet, "/api/v1/destinations?"+query, nil))
	var p DestinationsPage
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	}
	return p, rec.Code, rec.Body.Len()
}

func TestDestinationsPagingAndSearch(t *testing.T) {
	const n = 10000
	st := fakeFlusher(n)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for name, status := range map[string]any{"value": st, "pointer": &st} {
		t.Run(name, func(t *testing.T) {
			a := &handler{d: Deps{Log: log, Statuses: map[string]func() any{
				"flusher": func() any { return status },
				"router":  func() any { return map[string]any{"state": "running"} },
			}}}

			p, code, size := getDestinations(t, a, "")
			if code != 200 || p.Total != n || p.All != n || !p.Available || len(p.Destinations) != defaultDestinationsLimit {
				t.Fatalf("default page: code %d total %d all %d rows %d", code, p.Total, p.All, len(p.Destinations))
			}
			if size > 16<<10 {
				t.Fatalf("a page of %d rows is %d bytes: the page is not paged", len(p.Destinations), size)
			}
			for i, d := range p.Destinations {
				if want := fmt.Sprintf("tenant_%05d", i); d.Destination != want {
					t.Fatalf("row %d is %s, want %s (sorted by destination)", i, d.Destination, want)
				}
			}
			if d := p.Destinations[7]; d.State != "flushing" || d.BufferedRows != 7 || d.Cursor != "0/7:1" || d.LagSeconds != 0.7 || d.LastPack != "pack-7" || d.Partition != 7 {
				t.Fatalf("row 7: %+v", d)
			}
			for _, s := range fakeStates {
				if p.States[s] != n/len(fakeStates) {
					t.Fatalf("states %v", p.States)
				}
			}

			// destination= and value= select exactly one; an alias is refused.
			for _, q := range []string{"destination=tenant_00042", "value=tenant_00042"} {
				if p, code, _ := getDestinations(t, a, q); code != 200 || p.Total != 1 || len(p.Destinations) != 1 || p.Destinations[0].Destination != "tenant_00042" {
					t.Fatalf("%s: code %d %+v", q, code, p)
				}
			}
			for _, q := range []string{"destination=~c4n65", "destination=a&value=a", "destination=a.b"} {
				if _, code, _ := getDestinations(t, a, q); code != http.StatusBadRequest {
					t.Fatalf("%s: code %d, want 400", q, code)
				}
			}

			// The last, partial page.
			p, _, _ = getDestinations(t, a, "offset=9990&limit=50")
			if p.Total != n || len(p.Destinations) != 10 || p.Destinations[0].Destination != "tenant_09990" || p.Destinations[9].Destination != "tenant_09999" {
				t.Fatalf("last page: total %d rows %d %+v", p.Total, len(p.Destinations), p.Destinations)
			}
			// Past the end: no rows, the total still says how many.
			p, _, _ = getDestinations(t, a, "offset=20000")
			if p.Total != n || len(p.Destinations) != 0 {
				t.Fatalf("past the end: total %d rows %d", p.Total, len(p.Destinations))
			}
			// Walking every page visits every destination once, in order.
			seen := 0
			for off := 0; off < n; off += maxDestinationsLimit {
				p, _, _ = getDestinations(t, a, fmt.Sprintf("offset=%d&limit=%d", off, maxDestinationsLimit))
				for i, d := range p.Destinations {
					if want := fmt.Sprintf("tenant_%05d", off+i); d.Destination != want {
						t.Fatalf("offset %d row %d: %s, want %s", off, i, d.Destination, want)
					}
					seen++
				}
			}
			if seen != n {
				t.Fatalf("paging visited %d of %d", seen, n)
			}

			// Search is a case-insensitive substring match, applied before paging.
			p, _, _ = getDestinations(t, a, "q=TENANT_04&limit=1000")
			if p.Total != 1000 || len(p.Destinations) != 1000 || p.All != n {
				t.Fatalf("q=TENANT_04: total %d rows %d", p.Total, len(p.Destinations))
			}
			for _, d := range p.Destinations {
				if !strings.HasPrefix(d.Destination, "tenant_04") {
					t.Fatalf("q=TENANT_04 matched %s", d.Destination)
				}
			}
			p, _, _ = getDestinations(t, a, "q=tenant_04242")
			if p.Total != 1 || len(p.Destinations) != 1 || p.Destinations[0].Destination != "tenant_04242" {
				t.Fatalf("q=tenant_04242: %+v", p)
			}
			p, _, _ = getDestinations(t, a, "q=nobody")
			if p.Total != 0 || len(p.Destinations) != 0 || p.All != n {
				t.Fatalf("q=nobody: %+v", p)
			}

			// The state filter, alone, combined with search, and as a list.
			p, _, _ = getDestinations(t, a, "state=halted&limit=5")
			if p.Total != n/5 || len(p.Destinations) != 5 || p.Destinations[0].Destination != "tenant_00004" {
				t.Fatalf("state=halted: total %d %+v", p.Total, p.Destinations)
			}
			for _, d := range p.Destinations {
				if d.State != "halted" || !strings.Contains(d.LastError, d.Destination) {
					t.Fatalf("state=halted row %+v", d)
				}
			}
			p, _, _ = getDestinations(t, a, "state=halted&q=tenant_01&offset=10&limit=3")
			if p.Total != 200 || len(p.Destinations) != 3 || p.Destinations[0].Destination != "tenant_01054" {
				t.Fatalf("state=halted&q=tenant_01: total %d %+v", p.Total, p.Destinations)
			}
			p, _, _ = getDestinations(t, a, "state=halted,lagging")
			if p.Total != 2*n/5 {
				t.Fatalf("state=halted,lagging: total %d", p.Total)
			}

			for _, bad := range []string{"limit=0", "limit=1001", "limit=x", "offset=-1", "offset=1.5"} {
				if _, code, _ := getDestinations(t, a, bad); code != http.StatusBadRequest {
					t.Fatalf("%s: code %d, want 400", bad, code)
				}
			}

			// One request over 10,000 destinations stays cheap.
			const reps = 20
			start := time.Now()
			for range reps {
				getDestinations(t, a, "q=tenant_0&offset=500")
			}
			t.Logf("%d destinations (%s): %v per search+page request", n, name, time.Since(start)/reps)
		})
	}
}

func TestDestinationsWithoutFlusher(t *testing.T) {
	a := &handler{d: Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Statuses: map[string]func() any{
		"router": func() any { return map[string]any{"state": "running"} },
	}}}
	p, code, _ := getDestinations(t, a, "")
	if code != 200 || p.Available || p.Total != 0 || p.Destinations == nil {
		t.Fatalf("code %d %+v", code, p)
	}
}

// TestSummaryLeavesOutDestinations checks the page's poll does not carry
// the 10,000-entry list, and still carries the flusher's counters and the
// real JetStream streams with their consumers.
func TestSummaryLeavesOutDestinations(t *testing.T) {
	env := newDLQEnv(t)
	st := fakeFlusher(10000)
	a := &handler{d: Deps{JS: env.js, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Statuses: map[string]func() any{
		"flusher": func() any { return st },
	}}}
	rec := httptest.NewRecorder()
	a.summary(rec, httptest.NewRequest(http.MethodGet, "/api/v1/status/summary", nil))
	if rec.Code != 200 {
		t.Fatalf("code %d: %s", rec.Code, rec.Body)
	}
	if rec.Body.Len() > 16<<10 {
		t.Fatalf("summary is %d bytes", rec.Body.Len())
	}
	var s struct {
		Services map[string]map[string]any `json:"services"`
		Streams  []StreamStatus            `json:"streams"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	fl := s.Services["flusher"]
	if _, ok := fl["destinations"]; ok || fl["id"] != "fake" || fl["states"] == nil {
		t.Fatalf("flusher summary: %v", fl)
	}
	if len(st.Destinations) != 10000 {
		t.Fatal("the summary modified the flusher's status")
	}
	if len(s.Streams) == 0 {
		t.Fatalf("no streams: %s", rec.Body)
	}
}

// TestDestinationsRefuseUntypedStatus: a flusher entry whose status is not
// the flusher's own type is a wiring error, reported, not decoded through
// JSON into a guess.
func TestDestinationsRefuseUntypedStatus(t *testing.T) {
	a := &handler{d: Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Statuses: map[string]func() any{
		"flusher": func() any { return map[string]any{"destinations": []any{map[string]any{"destination": "d1"}}} },
	}}}
	if _, code, _ := getDestinations(t, a, ""); code != http.StatusInternalServerError {
		t.Fatalf("untyped flusher status: code %d, want 500", code)
	}
}

// TestStatusHaltsView: GET /api/v1/status?view=halts answers every
// service's summary where it has one (the flusher's lists its halted
// destinations alone) and refuses an unknown view.
func TestStatusHaltsView(t *testing.T) {
	full := fakeFlusher(1000)
	halted := flusher.Status{Destinations: []flusher.DestinationStatus{{Destination: "t1", State: "halted", LastError: "boom"}}}
	a := &handler{d: Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Statuses:  map[string]func() any{"flusher": func() any { return full }, "reader": func() any { return map[string]any{"halted_tables": map[string]string{}} }},
		Summaries: map[string]func() any{"flusher": func() any { return halted }}}}
	rec := httptest.NewRecorder()
	a.status(rec, httptest.NewRequest(http.MethodGet, "/api/v1/status?view=halts", nil))
	var got struct {
		Services struct {
			Flusher flusher.Status `json:"flusher"`
			Reader  map[string]any `json:"reader"`
		} `json:"services"`
		Streams []StreamStatus `json:"streams"`
	}
	if err := json.NewDecoder(rec.Body).Decode(&got); err != nil || rec.Code != 200 {
		t.Fatalf("code %d: %v", rec.Code, err)
	}
	if d := got.Services.Flusher.Destinations; len(d) != 1 || d[0].Destination != "t1" || got.Services.Reader == nil || got.Streams != nil {
		t.Fatalf("halts view: %+v", got)
	}
	rec = httptest.NewRecorder()
	a.status(rec, httptest.NewRequest(http.MethodGet, "/api/v1/status?view=everything", nil))
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("unknown view: code %d", rec.Code)
	}
}
