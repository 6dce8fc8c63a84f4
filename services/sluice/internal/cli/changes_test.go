package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// `sluice changes` against the API over a real chDB catalog (issue 35):
// its jsonl lines (the README's form: op, position, key, row, old) over
// pages of one key, the Arrow form's rows, and exit 2 for --from after --to.
func TestChangesCommand(t *testing.T) {
	ctx := t.Context()
	c := catalog.New(chtest.Conn(t), catalog.Options{Prefix: "sluice"})
	if err := c.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(t.TempDir(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	row := func(id int64, name string) map[string]any {
		return map[string]any{"id": id, "tenant": "shop1", "name": name, "qty": int32(id), "price": "1", "ratio": 0.5, "ok": true, "at": int64(0), "local": int64(0),
			"day": int32(0), "tags": []any{"a"}, "doc": `{}`, "raw": []byte{1}, "big": "x"}
	}
	catalogtest.PublishEach(t, c, store, catalogtest.Items, "shop1", [][]catalogtest.Row{
		{catalogtest.Ins(10, 1, row(1, "a")), catalogtest.Ins(10, 2, row(2, "b"))},
		{catalogtest.Upd(20, 1, row(1, "a2")), catalogtest.Del(20, 2, map[string]any{"id": int64(2), "tenant": "shop1"}), catalogtest.Ins(20, 3, row(3, "c"))},
	})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
	api.Register(h, api.Deps{Log: log, Reads: api.CatalogReads{C: c}})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	run := func(args ...string) (string, int) {
		t.Helper()
		var code int
		out := stdout(t, func() {
			code = Main(append([]string{"--server", srv.URL, "--config", "/nonexistent/sluice.yaml", "changes", "--destination", "shop1", "--table", catalogtest.Items.Name}, args...))
		})
		return out, code
	}
	out, code := run("--from", "1", "--page-size", "1")
	if code != 0 {
		t.Fatalf("changes --from 1: exit %d, %s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("changes --from 1: %d lines, want 3:\n%s", len(lines), out)
	}
	var got []string
	for _, ln := range lines {
		var ch struct {
			Op       string         `json:"op"`
			Position string         `json:"position"`
			Key      map[string]any `json:"key"`
			Row      map[string]any `json:"row"`
			Old      map[string]any `json:"old"`
		}
		if err := json.Unmarshal([]byte(ln), &ch); err != nil {
			t.Fatalf("line %s: %v", ln, err)
		}
		got = append(got, ch.Op+" "+ch.Position+" "+strconv.Itoa(int(ch.Key["id"].(float64)))+" "+str(ch.Row["name"])+" "+str(ch.Old["name"]))
	}
	if want := "update 0/14:1 1 a2 a|delete 0/14:2 2 <nil> b|insert 0/14:3 3 c <nil>"; strings.Join(got, "|") != want {
		t.Fatalf("changes:\n got %s\nwant %s", strings.Join(got, "|"), want)
	}
	if out, code := run("--from", "2", "--to", "2"); code != 0 || out != "" {
		t.Fatalf("from == to: exit %d, %q", code, out)
	}
	if _, code := run("--from", "2", "--to", "1"); code != 2 {
		t.Fatalf("--from after --to: exit %d, want 2", code)
	}

	out, code = run("--from", "1", "--to", "2", "--format", "arrow")
	if code != 0 {
		t.Fatalf("--format arrow: exit %d", code)
	}
	r, err := ipc.NewFileReader(bytes.NewReader([]byte(out)), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if f := r.Schema().Field(0).Name + "," + r.Schema().Field(1).Name + "," + r.Schema().Field(2).Name; f != "_sluice_change,_sluice_position,id" {
		t.Fatalf("arrow columns %s", f)
	}
	n := int64(0)
	for i := range r.NumRecords() {
		rec, err := r.RecordBatch(i)
		if err != nil {
			t.Fatal(err)
		}
		n += rec.NumRows()
	}
	if n != 3 {
		t.Fatalf("arrow rows %d, want 3", n)
	}
}

func str(v any) string {
	if v == nil {
		return "<nil>"
	}
	return v.(string)
}
