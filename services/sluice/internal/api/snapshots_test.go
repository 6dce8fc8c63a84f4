package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

func apiItem(id int64, name string) map[string]any {
	return map[string]any{"id": id, "tenant": "shop1", "name": name, "qty": int32(id), "price": "1.5",
		"ratio": 0.5, "ok": true, "at": int64(1700000000123456), "local": int64(-1), "day": int32(19000),
		"tags": []any{"a", nil}, "doc": `{"a": 1}`, "raw": []byte{0, 1}, "big": "x"}
}

// The snapshots API over a real chDB catalog: pin and unpin round trip,
// an expired version answers 410 naming the oldest retained, a pinned old
// version reads identically after expiry, and ?before=&limit= pages return
// every retained snapshot once.
func TestSnapshotsRetentionHTTP(t *testing.T) {
	ctx := t.Context()
	conn := chtest.Conn(t)
	c := catalog.New(conn, catalog.Options{Prefix: "sluice"})
	if err := c.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(t.TempDir(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	var packs [][]catalogtest.Row
	for i := int64(1); i <= 8; i++ {
		packs = append(packs, []catalogtest.Row{
			catalogtest.Ins(uint64(i*10), 1, apiItem(1, "v"+strconv.FormatInt(i, 10))), catalogtest.Ins(uint64(i*10), 2, apiItem(i+1, "x"))})
	}
	l := catalogtest.PublishEach(t, c, store, catalogtest.Items, "shop1", packs)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
	Register(h, Deps{Log: log, Reads: CatalogReads{C: c}})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	call := func(method, path, body string, out any) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if method != http.MethodGet {
			req.Header.Set(ClientHeader, "test")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if out != nil && resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s %s: %s: %v", method, path, b, err)
			}
		}
		return resp.StatusCode, string(b) + resp.Header.Get(NextBeforeHeader)
	}
	rows := func(v int) (int, string) {
		var p RowsPage
		code, body := call(http.MethodGet, "/api/v1/rows?destination=shop1&table="+catalogtest.Items.Name+"&snapshot="+strconv.Itoa(v), "", &p)
		if code == http.StatusOK {
			b, _ := json.Marshal(p.Rows)
			return code, string(b)
		}
		return code, body
	}
	code, pinned := rows(2)
	if code != http.StatusOK || !strings.Contains(pinned, `"v2"`) {
		t.Fatalf("reading version 2: %d %s", code, pinned)
	}

	// Pin round trip: the pin shows in the listing, unpin clears it.
	var p Pin
	if code, body := call(http.MethodPost, "/api/v1/snapshots/3/pin", `{"reason":"temp"}`, &p); code != http.StatusOK || !p.Pinned || p.Reason != "temp" {
		t.Fatalf("pinning 3: %d %s %+v", code, body, p)
	}
	if resp, err := http.Post(srv.URL+"/api/v1/snapshots/4/pin", "application/json", nil); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("pin without the client header: %v %v; want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	var snaps []Snapshot
	call(http.MethodGet, "/api/v1/snapshots", "", &snaps)
	if len(snaps) != 8 || !snaps[2].Pinned || snaps[2].PinReason != "temp" || snaps[1].Pinned {
		t.Fatalf("listing after pinning 3: %+v", snaps)
	}
	if code, body := call(http.MethodPost, "/api/v1/snapshots/3/unpin", "", nil); code != http.StatusOK {
		t.Fatalf("unpinning 3: %d %s", code, body)
	}
	call(http.MethodGet, "/api/v1/snapshots", "", &snaps)
	if snaps[2].Pinned {
		t.Fatalf("snapshot 3 still pinned after unpin: %+v", snaps[2])
	}
	if code, body := call(http.MethodPost, "/api/v1/snapshots/2/pin", `{"reason":"keep"}`, nil); code != http.StatusOK {
		t.Fatalf("pinning 2: %d %s", code, body)
	}
	if code, _ := call(http.MethodPost, "/api/v1/snapshots/99/pin", "", nil); code != http.StatusNotFound {
		t.Fatalf("pinning unpublished 99: %d, want 404", code)
	}

	// Expire everything but the newest 3 (6, 7, 8).
	if hz, err := c.AdvanceRetention(ctx, l, catalog.RetentionPolicy{Retention: time.Microsecond, RetainMin: 3}); err != nil || hz != 6 {
		t.Fatalf("advance: %d, %v", hz, err)
	}
	code, body := rows(4)
	if code != http.StatusGone || !strings.Contains(body, "snapshot 4 has expired") || !strings.Contains(body, "the oldest retained snapshot is 6") {
		t.Fatalf("reading expired 4: %d %s; want 410 naming the oldest retained 6", code, body)
	}
	if code, body := call(http.MethodPost, "/api/v1/snapshots/4/pin", "", nil); code != http.StatusGone {
		t.Fatalf("pinning expired 4: %d %s; want 410", code, body)
	}
	if code, again := rows(2); code != http.StatusOK || again != pinned {
		t.Fatalf("pinned 2 after expiry: %d %s; want %s", code, again, pinned)
	}

	// Pages of 1 and of 2: every retained snapshot (2 pinned, 6, 7, 8) once.
	for _, limit := range []int{1, 2, 10} {
		var seen []uint64
		before := ""
		for range 10 {
			var page []Snapshot
			path := "/api/v1/snapshots?limit=" + strconv.Itoa(limit)
			if before != "" {
				path += "&before=" + before
			}
			req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			for _, s := range page {
				seen = append(seen, s.Version)
			}
			before = resp.Header.Get(NextBeforeHeader)
			if before == "" {
				break
			}
		}
		slices.Sort(seen)
		if want := []uint64{2, 6, 7, 8}; !reflect.DeepEqual(seen, want) {
			t.Fatalf("limit %d: paged %v, want %v", limit, seen, want)
		}
	}
	if code, body := call(http.MethodGet, "/api/v1/snapshots/latest", "", &snaps[0]); code != http.StatusOK || snaps[0].Version != 8 {
		t.Fatalf("latest: %d %s", code, body)
	}
}
