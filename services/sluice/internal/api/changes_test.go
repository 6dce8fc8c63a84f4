package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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

// GET /api/v1/changes over a real chDB catalog (issue 35): pages of the
// changes between two versions, keyset-paged with after= and to= pinned;
// 400 for from after to, no from, a bad limit or cursor; 404 for an
// unknown version; 410 naming the oldest retained version for an expired
// from.
func TestChangesHTTP(t *testing.T) {
	ctx := t.Context()
	c := catalog.New(chtest.Conn(t), catalog.Options{Prefix: "sluice"})
	if err := c.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(t.TempDir(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	// Version i inserts key i+1 and updates key 1; version 4 deletes key 2.
	var packs [][]catalogtest.Row
	for i := int64(1); i <= 5; i++ {
		rows := []catalogtest.Row{catalogtest.Ins(uint64(i*10), 1, apiItem(1, "v"+strconv.FormatInt(i, 10))), catalogtest.Ins(uint64(i*10), 2, apiItem(i+1, "x"))}
		if i == 4 {
			rows = append(rows, catalogtest.Del(uint64(i*10), 3, map[string]any{"id": int64(2), "tenant": "shop1"}))
		}
		packs = append(packs, rows)
	}
	l := catalogtest.PublishEach(t, c, store, catalogtest.Items, "shop1", packs)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
	Register(h, Deps{Log: log, Reads: CatalogReads{C: c}})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	get := func(query string) (int, string, ChangesPage) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/v1/changes?table=" + catalogtest.Items.Name + "&" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var p ChangesPage
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
		}
		return resp.StatusCode, string(b), p
	}

	// From 2 to the latest (5), one key a page: key 1 updated, key 2
	// deleted (its tombstone's position), keys 4, 5, 6 inserted.
	var got []string
	q := "destination=shop1&from=2&limit=1"
	for range 10 {
		code, body, p := get(q)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", q, code, body)
		}
		if p.From != 2 || p.To != 5 {
			t.Fatalf("page from %d to %d, want 2 to 5", p.From, p.To)
		}
		for _, ch := range p.Changes {
			got = append(got, ch.Op+" "+string(ch.Key)+" "+ch.Position)
		}
		if p.Next == "" {
			break
		}
		q = "destination=shop1&from=2&limit=1&to=" + strconv.FormatUint(p.To, 10) + "&after=" + p.Next
	}
	want := "update {\"id\":1} 0/32:1|delete {\"id\":2} 0/28:3|insert {\"id\":4} 0/1E:2|insert {\"id\":5} 0/28:2|insert {\"id\":6} 0/32:2"
	if strings.Join(got, "|") != want {
		t.Fatalf("changes:\n got %s\nwant %s", strings.Join(got, "|"), want)
	}
	// The value= form names the same destination.
	if code, body, p := get("value=shop1&from=4&to=5"); code != http.StatusOK || len(p.Changes) != 2 {
		t.Fatalf("value=: %d %s", code, body)
	}
	if code, body, p := get("destination=shop1&from=3&to=3"); code != http.StatusOK || len(p.Changes) != 0 || p.Next != "" {
		t.Fatalf("from == to: %d %s", code, body)
	}
	for _, bad := range []string{"destination=shop1&from=4&to=3", "destination=shop1", "destination=shop1&from=x", "destination=shop1&from=1&limit=0", "destination=shop1&from=1&after=zz"} {
		if code, body, _ := get(bad); code != http.StatusBadRequest {
			t.Fatalf("%s: %d %s, want 400", bad, code, body)
		}
	}
	if code, body, _ := get("destination=shop1&from=9&to=9"); code != http.StatusNotFound {
		t.Fatalf("an unknown version: %d %s, want 404", code, body)
	}
	if _, err := c.AdvanceRetention(ctx, l, catalog.RetentionPolicy{Retention: time.Microsecond, RetainMin: 3}); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get("destination=shop1&from=1&to=5"); code != http.StatusGone || !strings.Contains(body, "oldest retained snapshot is 3") {
		t.Fatalf("an expired from: %d %s, want 410 naming 3", code, body)
	}
	if code, body, _ := get("destination=shop1&from=3&to=5"); code != http.StatusOK {
		t.Fatalf("retained: %d %s", code, body)
	}
}
