package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/state"
)

// TestHaltOutlivesItsDeadLetter: a corrupt pack's halt is state, not a
// message. Over a real JetStream and state database: the indexer's dead
// letter is seen and recorded; deleted from the DLQ as its max age would
// (JetStream's own delete), the halt stays, says its dead letter is gone
// and how to end it; `sluice dlq purge --seq N` ends it, and a replay
// ends another's. Its control, the same API without the ledger: the halt
// vanishes with its message, and sluice wait would pass it.
func TestHaltOutlivesItsDeadLetter(t *testing.T) {
	ctx := context.Background()
	pool := stateDB(t)
	ledger := state.NewHaltLedger(pool, "sluice")
	env := newDLQEnv(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	serve := func(halts *state.HaltLedger) *httptest.Server {
		h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
		Register(h, Deps{Log: log, JS: env.js, Halts: halts, Config: config.Default()})
		srv := httptest.NewServer(h.Handler())
		t.Cleanup(srv.Close)
		return srv
	}
	withLedger, without := serve(ledger), serve(nil)
	call := func(srv *httptest.Server, method, path string, out any) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Header.Set(ClientHeader, "test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if out != nil && resp.StatusCode < 300 {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, b)
			}
		}
		return resp.StatusCode, string(b)
	}
	halted := func(srv *httptest.Server) []PackHalt {
		t.Helper()
		var st Status
		if code, body := call(srv, "GET", "/api/v1/status", &st); code != 200 {
			t.Fatalf("status: %d %s", code, body)
		}
		return st.HaltedPacks
	}
	// Ending a halt whose dead letter is gone changes nothing on the DLQ,
	// so the status sees it once its cached scan expires (haltCacheTTL):
	// a halt shows a moment longer, never shorter.
	ends := func(srv *httptest.Server) []PackHalt {
		t.Helper()
		deadline := time.Now().Add(10 * haltCacheTTL)
		for {
			h := halted(srv)
			if len(h) == 0 || time.Now().After(deadline) {
				return h
			}
			time.Sleep(haltCacheTTL / 5)
		}
	}
	deadLetter := func(path string) uint64 {
		hdr := nats.Header{}
		hdr.Set(proto.HeaderTable, "public.items")
		hdr.Set(proto.HeaderPackPath, path)
		hdr.Set(proto.HeaderFirst, "0/10:1")
		hdr.Set(proto.HeaderLast, "0/10:2")
		hdr.Set(proto.HeaderHaltDestinations, "1")
		hdr.Set(proto.HeaderDestination, "shop1")
		return env.deadLetter(t, proto.StreamPacks, "sluice.packs.shop1", "indexer", "corrupt pack", []byte("x"), hdr)
	}
	seq := deadLetter("shop1/a.arrow")
	if h := halted(withLedger); len(h) != 1 || h[0].DLQSeq != seq || h[0].Gone {
		t.Fatalf("halts with the dead letter on the DLQ: %+v", h)
	}
	if h := halted(without); len(h) != 1 {
		t.Fatalf("control, halts with the dead letter on the DLQ: %+v", h)
	}
	// The DLQ drops it (max age): JetStream's own delete, not sluice's.
	dlq, err := env.js.Stream(ctx, proto.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	if err := dlq.DeleteMsg(ctx, seq); err != nil {
		t.Fatal(err)
	}
	h := halted(withLedger)
	if len(h) != 1 || h[0].DLQSeq != seq || !h[0].Gone || h[0].Table != "public.items" || len(h[0].Destinations) != 1 || h[0].Destinations[0] != "shop1" ||
		!strings.Contains(strings.Join(h[0].Recover, "; "), "sluice dlq purge --seq "+strconv.FormatUint(seq, 10)) {
		t.Fatalf("halts once the dead letter is gone: %+v, want it kept, saying so and how to end it", h)
	}
	if h := halted(without); len(h) != 0 {
		t.Fatalf("control without the ledger: %+v, want the halt gone with its message (the defect the ledger fixes)", h)
	}
	// Purging the gone dead letter accepts the loss: the halt ends.
	var pr PurgeResult
	if code, body := call(withLedger, "DELETE", "/api/v1/dlq/"+strconv.FormatUint(seq, 10)+"?stage=indexer", &pr); code != 200 || pr.Purged != 1 {
		t.Fatalf("purge of the gone dead letter: %d %s", code, body)
	}
	if h := ends(withLedger); len(h) != 0 {
		t.Fatalf("halts after the purge: %+v", h)
	}
	if code, _ := call(withLedger, "DELETE", "/api/v1/dlq/"+strconv.FormatUint(seq, 10)+"?stage=indexer", nil); code != http.StatusNotFound {
		t.Fatalf("a second purge: %d, want 404", code)
	}
	// A replayed dead letter ends its halt too (the pack event goes back
	// to PACKS; if still corrupt, the indexer dead-letters it anew).
	seq2 := deadLetter("shop1/b.arrow")
	if h := halted(withLedger); len(h) != 1 || h[0].DLQSeq != seq2 {
		t.Fatalf("halts of the second dead letter: %+v", h)
	}
	if code, body := call(withLedger, "POST", "/api/v1/dlq/"+strconv.FormatUint(seq2, 10)+"/replay", nil); code != 200 {
		t.Fatalf("replay: %d %s", code, body)
	}
	if kept, err := ledger.List(ctx); err != nil || len(kept) != 0 {
		t.Fatalf("ledger after the replay: %+v %v, want empty", kept, err)
	}
	if h := ends(withLedger); len(h) != 0 {
		t.Fatalf("halts after the replay: %+v", h)
	}
}
