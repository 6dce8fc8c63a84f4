package cli

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

func items(id int64, tenant string) map[string]any {
	return map[string]any{"id": id, "tenant": tenant, "name": fmt.Sprintf("item-%d", id), "qty": int32(id), "price": "12345678901234567890.123456789",
		"ratio": 0.5, "ok": true, "at": int64(1700000000123456), "local": int64(-1), "day": int32(19000),
		"tags": []any{"a", nil, "c"}, "doc": `{"a": 1}`, "raw": []byte{0, 1, 0xff}, "big": strings.Repeat("x", 50)}
}

// exportServer serves the API over a chDB catalog holding 12 rows of
// public.items for shop1 in two snapshots (v1: ids 1-10, v2: 11-12 more)
// and one row for shop2.
func exportServer(t *testing.T) (*catalog.Catalog, string) {
	t.Helper()
	c := exportCatalog(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
	api.Register(h, api.Deps{Reads: api.CatalogReads{C: c}, Config: config.Default(), Log: log})
	hs := httptest.NewServer(h.Handler())
	t.Cleanup(hs.Close)
	return c, hs.URL
}

// exportCatalog is exportServer's catalog.
func exportCatalog(t *testing.T) *catalog.Catalog {
	t.Helper()
	ctx := t.Context()
	c := catalog.New(chtest.Conn(t), catalog.Options{Prefix: "sluice"})
	if err := c.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(t.TempDir(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.AcquireLease(ctx, "test", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, ids := range [][2]int64{{1, 10}, {11, 12}} {
		var rows []catalogtest.Row
		for id := ids[0]; id <= ids[1]; id++ {
			rows = append(rows, catalogtest.Ins(uint64(100+i), uint64(id), items(id, "shop1")))
		}
		metas := []packstore.PackMeta{catalogtest.Write(t, store, catalogtest.Items, "shop1", fmt.Sprintf("p%d", i), rows)}
		if i == 0 {
			metas = append(metas, catalogtest.Write(t, store, catalogtest.Items, "shop2", "q0", []catalogtest.Row{catalogtest.Ins(100, 99, items(99, "shop2"))}))
		}
		var refs []catalog.PackRef
		for _, m := range metas {
			ref, err := catalog.ReadRef(ctx, store, m.Path())
			if err != nil {
				t.Fatal(err)
			}
			refs = append(refs, ref)
		}
		if _, err := c.Index(ctx, store, refs); err != nil {
			t.Fatal(err)
		}
		res, err := c.Publish(ctx, l, 10*time.Second, proto.LSN(0x1000+i))
		if err != nil {
			t.Fatal(err)
		}
		l = res.Lease
	}
	return c
}

func runCLI(t *testing.T, args ...string) error {
	t.Helper()
	root := newRoot()
	root.SetArgs(append(args, "--config", filepath.Join(t.TempDir(), "none.yaml")))
	root.SetOut(io.Discard)
	return root.ExecuteContext(t.Context())
}

// TestExportCommand runs `sluice export` against the API over a real chDB
// catalog: every table of the destination lands as one file per table, the
// jsonl file is exactly what the read path returns at the pinned snapshot,
// the Parquet file holds the same rows (read back through chDB file()),
// and an older --snapshot exports that snapshot. Negative control: a server
// that ends the body without the row-count trailer (a truncated file) makes
// the command fail and leaves no file.
func TestExportCommand(t *testing.T) {
	c, server := exportServer(t)
	read := func(v uint64) []byte {
		var b bytes.Buffer
		cur := ""
		for {
			p, err := c.Read(t.Context(), catalog.ReadRequest{Destination: "shop1", Table: catalogtest.Items.Name, Version: v, Cursor: cur})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range p.Rows {
				b.Write(r)
				b.WriteByte('\n')
			}
			if p.Next == "" {
				return b.Bytes()
			}
			cur = p.Next
		}
	}
	for _, tc := range []struct {
		snapshot string
		version  uint64
		rows     int
	}{{"", 2, 12}, {"1", 1, 10}} {
		t.Run("snapshot="+tc.snapshot, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			args := []string{"export", "--server", server, "--destination", "shop1", "--out", dir}
			if tc.snapshot != "" {
				args = append(args, "--snapshot", tc.snapshot)
			}
			for _, f := range []string{"jsonl", "parquet"} {
				if err := runCLI(t, append(args, "--format", f)...); err != nil {
					t.Fatalf("export --format %s: %v", f, err)
				}
			}
			got, err := os.ReadFile(filepath.Join(dir, "public.items.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			if want := read(tc.version); !bytes.Equal(got, want) || bytes.Count(got, []byte("\n")) != tc.rows {
				t.Fatalf("jsonl export differs from read at v%d:\n got %s\nwant %s", tc.version, got, want)
			}
			pq := filepath.Join(dir, "public.items.parquet")
			res, err := c.Conn().Query(t.Context(), fmt.Sprintf("SELECT count(), min(id), max(id), any(price), any(tenant) FROM file('%s', Parquet)", pq))
			if err != nil {
				t.Fatal(err)
			}
			if r := fmt.Sprint(res.Rows[0]...); r != fmt.Sprint(uint64(tc.rows), int64(1), int64(tc.rows), "12345678901234567890.123456789", "shop1") {
				t.Fatalf("parquet read back through chDB: %s", r)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 2 {
				t.Fatalf("export dir holds %v, want the two files", entries)
			}
		})
	}

	t.Run("refused", func(t *testing.T) {
		dir := t.TempDir()
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--table", "public.nope", "--format", "jsonl"}, "404"},
			{[]string{"--snapshot", "99", "--format", "jsonl"}, "404"},
			{[]string{"--format", "xlsx"}, "want parquet, arrow, csv or jsonl"},
		} {
			err := runCLI(t, append([]string{"export", "--server", server, "--destination", "shop1", "--out", dir}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("export %v: %v, want %q", tc.args, err, tc.want)
			}
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("refused exports left %v", entries)
		}
	})

	t.Run("truncated", func(t *testing.T) {
		trunc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/api/v1/snapshots/latest":
				_, _ = w.Write([]byte(`{"version": 2}`))
			case "/api/v1/export":
				w.Header().Set("Trailer", api.TrailerRowsTotal)
				_, _ = w.Write([]byte("{\"id\":1}\n")) // and then fails: no trailer
			default:
				http.NotFound(w, r)
			}
		}))
		defer trunc.Close()
		dir := t.TempDir()
		err := runCLI(t, "export", "--server", trunc.URL, "--destination", "shop1", "--table", "public.items", "--format", "jsonl", "--out", dir)
		if err == nil || !strings.Contains(err.Error(), "ended the file early") {
			t.Fatalf("export from a truncating server: %v", err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("a failed export left %v", entries)
		}
	})
}
