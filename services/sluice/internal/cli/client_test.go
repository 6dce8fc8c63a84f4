package cli

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/shared/httpx"
)

// TestClientSendsToken: the CLI presents the API token from
// SLUICE_HTTP_TOKEN, or from the config's http.token_file, to a server
// that requires it; without one it gets the server's 401.
func TestClientSendsToken(t *testing.T) {
	h := httpx.New("127.0.0.1:0", "s3cret", prometheus.NewRegistry(), nil)
	h.Handle("GET /api/v1/status", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{}`)) }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	dir := t.TempDir()
	call := func(g *globalFlags) error {
		c, err := g.client()
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		return c.get(context.Background(), "/api/v1/status", nil, &out)
	}

	t.Setenv("SLUICE_HTTP_TOKEN", "s3cret")
	if err := call(&globalFlags{server: h.Addr(), config: filepath.Join(dir, "none.yaml")}); err != nil {
		t.Fatalf("token from the environment: %v", err)
	}
	os.Unsetenv("SLUICE_HTTP_TOKEN")

	var ae *apiError
	if err := call(&globalFlags{server: h.Addr(), config: filepath.Join(dir, "none.yaml")}); !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Fatalf("without a token: %v, want 401", err)
	}

	tok := filepath.Join(dir, "token")
	conf := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte("http:\n  listen: "+h.Addr()+"\n  token_file: "+tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := call(&globalFlags{config: conf}); err != nil {
		t.Fatalf("token from http.token_file: %v", err)
	}
}
