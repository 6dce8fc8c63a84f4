package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/state"
)

// stateDB is a pool on a fresh database of the test Postgres with the
// state schema ("sluice") migrated, closed with t.
func stateDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := state.Migrate(t.Context(), pool, "sluice"); err != nil {
		t.Fatal(err)
	}
	return pool
}

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Shutdown()
	chtest.Close()
	os.Exit(code)
}

// The lifecycle endpoints against a real state database, behind a bearer
// token: status codes, bodies, refusals, and the client-header guard.
func TestLifecycleHTTP(t *testing.T) {
	pool := stateDB(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "tok", prometheus.NewRegistry(), log)
	Register(h, Deps{Log: log, States: state.NewDestinationStates(pool, "sluice")})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()

	call := func(method, path, body string, hdr bool, token string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if hdr {
			req.Header.Set(ClientHeader, "test")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, b)
			}
		}
		return resp.StatusCode
	}
	var ch LifecycleChange
	if code := call("POST", "/api/v1/destinations/shop1/pause", `{"reason":"maintenance"}`, true, "", nil); code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", code)
	}
	if code := call("POST", "/api/v1/destinations/shop1/pause", "", false, "tok", nil); code != http.StatusForbidden {
		t.Fatalf("without %s: %d", ClientHeader, code)
	}
	// Never seen: paused ahead of time.
	if code := call("POST", "/api/v1/destinations/shop1/pause", `{"reason":"maintenance"}`, true, "tok", &ch); code != 200 ||
		ch != (LifecycleChange{"shop1", state.Active, state.Paused}) {
		t.Fatalf("pause: %d %+v", code, ch)
	}
	// Never seen: retired ahead of time only when asked so (a typo would
	// drop a tenant's rows for good).
	var e Error
	if code := call("POST", "/api/v1/destinations/shop2/retire", "", true, "tok", &e); code != http.StatusConflict || !strings.Contains(e.Error, "never seen") || !strings.Contains(e.Error, "ahead=true") {
		t.Fatalf("retire never seen: %d %+v", code, e)
	}
	if code := call("POST", "/api/v1/destinations/shop2/retire?ahead=true", "", true, "tok", &ch); code != 200 || ch.To != state.Retired {
		t.Fatalf("retire ahead: %d %+v", code, ch)
	}
	var rows []state.DestinationStateRow
	if code := call("GET", "/api/v1/destinations/states", "", false, "tok", &rows); code != 200 || len(rows) != 2 ||
		rows[0].Destination != "shop1" || rows[0].Reason != "maintenance" || rows[1].State != state.Retired {
		t.Fatalf("states: %d %+v", code, rows)
	}
	if code := call("POST", "/api/v1/destinations/shop2/resume", "", true, "tok", &e); code != http.StatusConflict || !strings.Contains(e.Error, "gap") {
		t.Fatalf("resume retired: %d %+v", code, e)
	}
	// Not a name, and a routing value too long to make one.
	if code := call("POST", "/api/v1/destinations/~"+strings.Repeat("!", 200)+"/pause", "", true, "tok", &e); code != http.StatusBadRequest {
		t.Fatalf("invalid name: %d %+v", code, e)
	}
	if code := call("POST", "/api/v1/destinations/shop1/drain", "{not json", true, "tok", &e); code != http.StatusBadRequest {
		t.Fatalf("bad body: %d %+v", code, e)
	}
	if code := call("POST", "/api/v1/destinations/shop1/drain", "", true, "tok", &ch); code != 200 || ch.From != state.Paused || ch.To != state.Draining {
		t.Fatalf("drain: %d %+v", code, ch)
	}
	if code := call("POST", "/api/v1/destinations/shop1/pause", "", true, "tok", &e); code != http.StatusConflict {
		t.Fatalf("pause a draining destination: %d %+v", code, e)
	}
	if code := call("POST", "/api/v1/destinations/shop1/resume", "", true, "tok", &ch); code != 200 || ch.To != state.Active {
		t.Fatalf("resume: %d %+v", code, ch)
	}
	if code := call("GET", "/api/v1/destinations/states", "", false, "tok", &rows); code != 200 || len(rows) != 1 {
		t.Fatalf("states after resume: %d %+v", code, rows)
	}
	// The path takes a destination name only: a routing value there is
	// refused, and value= names it as the router does.
	if code := call("POST", "/api/v1/destinations/"+url.PathEscape("acme.corp/x")+"/pause", "", true, "tok", &e); code != http.StatusBadRequest || !strings.Contains(e.Error, "value=") {
		t.Fatalf("pause by routing value in the path: %d %+v", code, e)
	}
	if code := call("POST", "/api/v1/destinations/pause?value="+url.QueryEscape("acme.corp/x"), "", true, "tok", &ch); code != 200 || ch.Destination != "~c5hmqp9ecdnn4s1ff0" {
		t.Fatalf("pause by value=: %d %+v", code, ch)
	}
	// A tenant whose routing value looks like a name is not that name's
	// tenant: value=~c4n64 is destination ~fphj8rhm6g, not ~c4n64 ("a.b").
	if code := call("POST", "/api/v1/destinations/pause?value=~c4n64", "", true, "tok", &ch); code != 200 || ch.Destination != "~fphj8rhm6g" {
		t.Fatalf("pause value=~c4n64: %d %+v", code, ch)
	}
	if code := call("POST", "/api/v1/destinations/pause?destination=~c4n64", "", true, "tok", &ch); code != 200 || ch.Destination != "~c4n64" {
		t.Fatalf("pause destination=~c4n64: %d %+v", code, ch)
	}
	// An alias of a name is refused on every lifecycle endpoint, naming
	// the canonical form, and changes nothing.
	for _, action := range []string{"pause", "resume", "drain", "retire"} {
		for _, path := range []string{"/api/v1/destinations/~c4n65/" + action, "/api/v1/destinations/" + action + "?destination=~c4n65"} {
			if code := call("POST", path, "", true, "tok", &e); code != http.StatusBadRequest || !strings.Contains(e.Error, "the canonical name of that value is ~c4n64") {
				t.Fatalf("POST %s: %d %+v", path, code, e)
			}
		}
	}
	if code := call("GET", "/api/v1/destinations/states?destination=~c4n65", "", false, "tok", &e); code != http.StatusBadRequest {
		t.Fatalf("states of an alias: %d %+v", code, e)
	}
	if code := call("GET", "/api/v1/destinations/states?value=a.b", "", false, "tok", &rows); code != 200 || len(rows) != 1 || rows[0].Destination != "~c4n64" || rows[0].State != state.Paused {
		t.Fatalf("states of value a.b: %d %+v", code, rows)
	}
	// Both parameters, or a parameter beside a path name, is refused.
	for _, path := range []string{"/api/v1/destinations/pause?destination=shop1&value=shop1", "/api/v1/destinations/pause", "/api/v1/destinations/shop1/pause?value=shop1"} {
		if code := call("POST", path, "", true, "tok", &e); code != http.StatusBadRequest {
			t.Fatalf("POST %s: %d %+v", path, code, e)
		}
	}
	// Seen (a state row, here a pause): retired without ahead.
	if code := call("POST", "/api/v1/destinations/shop3/pause", "", true, "tok", &ch); code != 200 {
		t.Fatalf("pause shop3: %d %+v", code, ch)
	}
	if code := call("POST", "/api/v1/destinations/retire?destination=shop3", "", true, "tok", &ch); code != 200 || ch.From != state.Paused || ch.To != state.Retired {
		t.Fatalf("retire a seen destination: %d %+v", code, ch)
	}

	// A process without the state database says so.
	h2 := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
	Register(h2, Deps{Log: log})
	srv2 := httptest.NewServer(h2.Handler())
	defer srv2.Close()
	req, _ := http.NewRequest("POST", srv2.URL+"/api/v1/destinations/shop1/pause", nil)
	req.Header.Set(ClientHeader, "test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("no state database: %d", resp.StatusCode)
	}
}
