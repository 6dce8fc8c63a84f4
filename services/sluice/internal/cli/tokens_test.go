package cli

import (
	"bytes"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/state"
)

// runCLIOut is runCLI with the command's stdout and stderr kept.
func runCLIOut(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRoot()
	root.SetArgs(append(args, "--config", filepath.Join(t.TempDir(), "none.yaml")))
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := root.ExecuteContext(t.Context())
	return out.String(), errOut.String(), err
}

// TestTokensCommand: the operator creates a tenant token of shop1 (printed
// once, with the warning), lists it (no secret) and revokes it; in
// between, the tenant, with it as its SLUICE_HTTP_TOKEN, exports and reads
// shop1 and is refused shop2, the status and token management; after the
// revocation its next read is refused.
func TestTokensCommand(t *testing.T) {
	c := exportCatalog(t)
	pool, err := pgxpool.New(t.Context(), pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := state.Migrate(t.Context(), pool, "sluice"); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "tok", prometheus.NewRegistry(), log)
	api.Register(h, api.Deps{Reads: api.CatalogReads{C: c}, Config: config.Default(), Log: log, Tokens: state.NewTokens(pool, "sluice")})
	hs := httptest.NewServer(h.Handler())
	defer hs.Close()
	server := hs.URL

	t.Setenv("SLUICE_HTTP_TOKEN", "tok")
	out, warn, err := runCLIOut(t, "tokens", "create", "--server", server, "--destination", "shop1", "--name", "reports", "--expires", "30d")
	if err != nil {
		t.Fatal(err)
	}
	tenant := strings.TrimSpace(out)
	id, secret, ok := state.ParseToken(tenant)
	if !ok || !strings.Contains(warn, "Store it now") || !strings.Contains(warn, "shop1") {
		t.Fatalf("create printed %q, %q", out, warn)
	}
	list, _, err := runCLIOut(t, "tokens", "list", "--server", server)
	if err != nil || !strings.Contains(list, id) || !strings.Contains(list, "reports") || !strings.Contains(list, "shop1") || strings.Contains(list, secret) {
		t.Fatalf("list: %v\n%s", err, list)
	}
	if _, _, err := runCLIOut(t, "tokens", "create", "--server", server, "--destination", "shop1", "--expires", "soon"); err == nil {
		t.Fatal("--expires soon accepted")
	}

	t.Setenv("SLUICE_HTTP_TOKEN", tenant)
	dir := filepath.Join(t.TempDir(), "out")
	if err := runCLI(t, "export", "--server", server, "--destination", "shop1", "--format", "jsonl", "--out", dir); err != nil {
		t.Fatalf("the tenant's export: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "public.items.jsonl")); err != nil || strings.Count(string(b), "\n") != 12 || strings.Contains(string(b), "shop2") {
		t.Fatalf("the tenant's export: %v, %d lines", err, strings.Count(string(b), "\n"))
	}
	if err := runCLI(t, "read", "--server", server, "--value", "shop1", "--table", "public.items", "--format", "csv"); err != nil {
		t.Fatalf("the tenant's read: %v", err)
	}
	for _, args := range [][]string{
		{"read", "--destination", "shop2", "--table", "public.items"},
		{"export", "--destination", "shop2", "--format", "csv", "--out", dir},
		{"status"},
		{"tokens", "list"},
		{"tokens", "create", "--destination", "shop1"},
		{"tokens", "revoke", id},
	} {
		if err := runCLI(t, append(args, "--server", server)...); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("tenant %v: %v, want 403", args, err)
		}
	}

	t.Setenv("SLUICE_HTTP_TOKEN", "tok")
	if _, _, err := runCLIOut(t, "tokens", "revoke", "--server", server, tenant); err == nil {
		t.Error("revoke took the token itself")
	}
	out, _, err = runCLIOut(t, "tokens", "revoke", "--server", server, id)
	if err != nil || !strings.Contains(out, "revoked") {
		t.Fatalf("revoke: %v %s", err, out)
	}
	t.Setenv("SLUICE_HTTP_TOKEN", tenant)
	if err := runCLI(t, "read", "--server", server, "--destination", "shop1", "--table", "public.items"); err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("read after revoke: %v", err)
	}
}
