package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/state"
)

// The resync endpoints against a real state database: a request names a
// listed table by its canonical name and at most one destination (by name
// or by routing value, stored with the value its rows carry); the POST needs
// the token and the client header; the list and one request read back.
func TestResyncsHTTP(t *testing.T) {
	pool := stateDB(t)
	cfg := config.Default()
	cfg.Source.Tables = []string{"public.orders"}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "tok", prometheus.NewRegistry(), log)
	Register(h, Deps{Log: log, Config: cfg, Resyncs: state.NewResyncs(pool, "sluice")})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	call := func(method, path, body string, hdr bool, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if hdr {
			req.Header.Set(ClientHeader, "test")
		}
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if out != nil && resp.StatusCode == 200 {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, b)
			}
		}
		return resp.StatusCode
	}
	for _, c := range []struct {
		body string
		hdr  bool
		want int
	}{
		{`{"table":"public.orders"}`, false, http.StatusForbidden},
		{`{"table":"public.nope"}`, true, http.StatusBadRequest},
		{`{"table":"orders"}`, true, http.StatusBadRequest},
		{`{"table":"public.orders","destination":"a","value":"a"}`, true, http.StatusBadRequest},
		{`{"table":"public.orders","destination":"~c4n65"}`, true, http.StatusBadRequest}, // an alias of ~c4n64
		{`not json`, true, http.StatusBadRequest},
	} {
		if code := call("POST", "/api/v1/resyncs", c.body, c.hdr, nil); code != c.want {
			t.Errorf("POST %s (header %v): %d, want %d", c.body, c.hdr, code, c.want)
		}
	}
	var all, one, byName state.Resync
	if code := call("POST", "/api/v1/resyncs", `{"table":"public.orders"}`, true, &all); code != 200 || all.State != state.ResyncQueued || all.Value != nil {
		t.Fatalf("POST whole table: %d %+v", code, all)
	}
	if code := call("POST", "/api/v1/resyncs", `{"table":"public.orders","value":"a.b"}`, true, &one); code != 200 ||
		one.Value == nil || *one.Value != "a.b" || one.Destination != "~c4n64" {
		t.Fatalf("POST by value: %d %+v", code, one)
	}
	if code := call("POST", "/api/v1/resyncs", `{"table":"public.orders","destination":"~c4n64"}`, true, &byName); code != 200 ||
		byName.Value == nil || *byName.Value != "a.b" {
		t.Fatalf("POST by destination name: %d %+v", code, byName)
	}
	var byQuery state.Resync
	if code := call("POST", "/api/v1/resyncs?table=public.orders&value=a.b", "", true, &byQuery); code != 200 ||
		byQuery.Value == nil || *byQuery.Value != "a.b" || byQuery.Destination != "~c4n64" {
		t.Fatalf("POST by query: %d %+v", code, byQuery)
	}
	if code := call("POST", "/api/v1/resyncs?table=public.orders", `{"table":"public.orders"}`, true, nil); code != http.StatusBadRequest {
		t.Fatalf("POST with body and query: %d", code)
	}
	var list []state.Resync
	if code := call("GET", "/api/v1/resyncs", "", false, &list); code != 200 || len(list) != 4 || list[0].ID != byQuery.ID {
		t.Fatalf("GET list: %d %+v", code, list)
	}
	var got state.Resync
	if code := call("GET", "/api/v1/resyncs/"+jsonID(one.ID), "", false, &got); code != 200 || got.ID != one.ID {
		t.Fatalf("GET one: %d %+v", code, got)
	}
	if code := call("GET", "/api/v1/resyncs/999", "", false, nil); code != http.StatusNotFound {
		t.Fatalf("GET unknown: %d", code)
	}
}

func jsonID(id int64) string { b, _ := json.Marshal(id); return string(b) }

// In destinations.mode list two routing values may share one destination.
// A scoped resync copies the rows of one value and its clear removes every
// row of the destination, so the other value's rows would vanish from later
// snapshots: such a resync is refused (409, naming the values and the
// table-wide resync), by name and by value alike; a destination of one
// value is resynced as before (the control).
func TestScopedResyncOfSharedDestinationRefused(t *testing.T) {
	pool := stateDB(t)
	cfg := config.Default()
	cfg.Source.Tables = []string{"public.orders"}
	cfg.Destinations.Mode = "list"
	cfg.Destinations.List = map[string]string{"acme": "shared", "acme-eu": "shared", "solo": "single"}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "tok", prometheus.NewRegistry(), log)
	Register(h, Deps{Log: log, Config: cfg, Resyncs: state.NewResyncs(pool, "sluice")})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	post := func(body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/api/v1/resyncs", strings.NewReader(body))
		req.Header.Set(ClientHeader, "test")
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, body := range []string{
		`{"table":"public.orders","destination":"shared"}`,
		`{"table":"public.orders","value":"acme"}`,
	} {
		code, msg := post(body)
		if code != http.StatusConflict || !strings.Contains(msg, "acme, acme-eu") || !strings.Contains(msg, "sluice resync --table public.orders") {
			t.Errorf("POST %s: %d %s, want 409 naming both values and the table-wide resync", body, code, msg)
		}
	}
	if code, msg := post(`{"table":"public.orders","destination":"single"}`); code != http.StatusOK {
		t.Errorf("control: a destination of one value: %d %s", code, msg)
	}
	if code, msg := post(`{"table":"public.orders"}`); code != http.StatusOK {
		t.Errorf("control: the whole table: %d %s", code, msg)
	}
}
