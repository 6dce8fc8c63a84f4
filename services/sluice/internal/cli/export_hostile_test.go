package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
)

// hostileExportServer answers `sluice export` like the API, listing the
// table names given. A fake, because the real API lists only tables the
// catalog holds, which are validated names: this is a server that lies (a
// compromised or mistaken --server).
func hostileExportServer(t *testing.T, tables []string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/snapshots/latest", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(api.Snapshot{Version: 1})
	})
	mux.HandleFunc("GET /api/v1/tables", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(api.TablesPage{Snapshot: 1, Destination: "d", Tables: tables})
	})
	mux.HandleFunc("GET /api/v1/export", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Trailer", api.TrailerRowsTotal)
		_, _ = w.Write([]byte("{\"pwned\":1}\n"))
		w.Header().Set(api.TrailerRowsTotal, "1")
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s.URL
}

// TestExportRefusesHostileTableNames: table names from the server become
// paths under --out only when they are canonical schema.table names; a
// server that answers "../../x", an absolute path or a name with a
// separator gets the command refused, naming the table, and nothing is
// written outside (or inside) --out. Negative control: the same server
// listing a canonical name gets its file written.
func TestExportRefusesHostileTableNames(t *testing.T) {
	for _, bad := range []string{"../../escape", "public/../../escape", "/tmp/escape", "public.x/../../../escape", "..", "public.items\x00", `public\..\escape`, "Public.Items"} {
		root := t.TempDir()
		out := filepath.Join(root, "a", "b", "out")
		server := hostileExportServer(t, []string{"public.items", bad})
		err := runCLI(t, "export", "--server", server, "--destination", "d", "--format", "jsonl", "--out", out)
		if err == nil || !strings.Contains(err.Error(), "will not make a file of") {
			t.Errorf("table %q: err = %v, want refused", bad, err)
		}
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				t.Errorf("table %q: wrote %s", bad, p)
			}
			return nil
		})
	}
	out := filepath.Join(t.TempDir(), "out")
	if err := runCLI(t, "export", "--server", hostileExportServer(t, []string{"public.items"}), "--destination", "d", "--format", "jsonl", "--out", out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "public.items.jsonl")); err != nil {
		t.Fatal(err)
	}
}
