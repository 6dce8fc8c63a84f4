package cli

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// stdout runs f with os.Stdout captured.
func stdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	return <-done
}

// `sluice snapshots pin/unpin`, `sluice snapshots --json` and `sluice read
// --snapshot V` against the API over a real chDB catalog: a pin shows as
// pinned, a pinned version reads after expiry, an expired one exits
// non-zero naming the oldest retained version.
func TestSnapshotsCommands(t *testing.T) {
	ctx := t.Context()
	c := catalog.New(chtest.Conn(t), catalog.Options{Prefix: "sluice"})
	if err := c.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(t.TempDir(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	var packs [][]catalogtest.Row
	for i := int64(1); i <= 4; i++ {
		packs = append(packs, []catalogtest.Row{catalogtest.Ins(uint64(i*10), 1, map[string]any{
			"id": i, "tenant": "shop1", "name": "n", "qty": int32(i), "price": "1", "ratio": 0.5, "ok": true, "at": int64(0), "local": int64(0),
			"day": int32(0), "tags": []any{"a"}, "doc": `{}`, "raw": []byte{1}, "big": "x"})})
	}
	l := catalogtest.PublishEach(t, c, store, catalogtest.Items, "shop1", packs)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
	api.Register(h, api.Deps{Log: log, Reads: api.CatalogReads{C: c}})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	run := func(args ...string) (string, int) {
		t.Helper()
		var code int
		out := stdout(t, func() {
			code = Main(append([]string{"--server", srv.URL, "--config", "/nonexistent/sluice.yaml"}, args...))
		})
		return out, code
	}
	read := func(v string) (string, int) {
		return run("read", "--destination", "shop1", "--table", catalogtest.Items.Name, "--snapshot", v)
	}
	if _, code := run("snapshots", "pin", "1", "--reason", "audit"); code != 0 {
		t.Fatalf("snapshots pin 1: exit %d", code)
	}
	out, code := run("snapshots", "--json")
	var snaps []api.Snapshot
	if code != 0 || json.Unmarshal([]byte(out), &snaps) != nil || len(snaps) != 4 || !snaps[0].Pinned || snaps[0].PinReason != "audit" || snaps[1].Pinned {
		t.Fatalf("snapshots --json after pin: exit %d, %s", code, out)
	}
	before, code := read("1")
	if code != 0 || strings.Count(before, "\n") != 1 {
		t.Fatalf("read --snapshot 1: exit %d, %q", code, before)
	}
	if _, err := c.AdvanceRetention(ctx, l, catalog.RetentionPolicy{Retention: time.Microsecond, RetainMin: 2}); err != nil {
		t.Fatal(err)
	}
	if after, code := read("1"); code != 0 || after != before {
		t.Fatalf("pinned read --snapshot 1 after expiry: exit %d, %q; want %q", code, after, before)
	}
	// The expired version: non-zero, and the error names the oldest retained.
	root := newRoot()
	root.SetArgs([]string{"--server", srv.URL, "--config", "/nonexistent/sluice.yaml", "read", "--destination", "shop1", "--table", catalogtest.Items.Name, "--snapshot", "2"})
	root.SetOut(io.Discard)
	err = root.ExecuteContext(ctx)
	if err == nil || !strings.Contains(err.Error(), "410") || !strings.Contains(err.Error(), "the oldest retained snapshot is 3") {
		t.Fatalf("read --snapshot 2 (expired): %v; want a 410 naming the oldest retained 3", err)
	}
	if _, code := read("2"); code == 0 {
		t.Fatal("read --snapshot 2 (expired) exited 0")
	}
	out, _ = run("snapshots", "--json")
	if err := json.Unmarshal([]byte(out), &snaps); err != nil || len(snaps) != 3 || snaps[0].Version != 1 || snaps[1].Version != 3 {
		t.Fatalf("snapshots --json after expiry: %s (want 1 pinned, 3, 4)", out)
	}
	if _, code := run("snapshots", "unpin", "1"); code != 0 {
		t.Fatalf("snapshots unpin 1: exit %d", code)
	}
	if _, code := read("1"); code == 0 {
		t.Fatal("read --snapshot 1 after unpin exited 0")
	}
	if _, code := run("snapshots", "pin", "x"); code != 2 {
		t.Fatalf("snapshots pin x: exit %d, want 2", code)
	}
}
