package cli

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/chdbhttp"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/secret"
)

// TestCatalogServeRefusesOpenListen: `sluice catalog serve
// --insecure-no-auth` does not start on an address other hosts can reach
// (checked before the engine is opened); the flag is for loopback only.
func TestCatalogServeRefusesOpenListen(t *testing.T) {
	cmd := &cobra.Command{}
	cmd.SetContext(context.Background())
	err := serveCatalog(cmd, config.Catalog{URL: "embedded"}, t.TempDir(), "0.0.0.0:0", true)
	var ee *exitError
	if !errors.As(err, &ee) || !errors.Is(ee.err, chdbhttp.ErrInsecureOffLoopback) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("serveCatalog --insecure-no-auth on 0.0.0.0: %v", err)
	}
}

// TestCatalogServeGeneratesCredentials: without configured credentials,
// `sluice catalog serve` generates a password into
// <data_dir>/catalog_password (0600, in a 0700 data dir) and requires it:
// issue 33's cross-site POST and a request without the password are
// refused and write nothing; clickhouse-go with the file's password
// (catalog.password_file, as a client loads it) works; a restart keeps the
// password.
func TestCatalogServeGeneratesCredentials(t *testing.T) {
	// The test binary has one chDB engine; serve it (its directory is
	// <dataDir>/catalog).
	dataDir := filepath.Dir(chtest.Engine(t).Dir())
	pwFile := CatalogPasswordFile(dataDir)
	var first string
	for run := 0; run < 2; run++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		ctx, cancel := context.WithCancel(context.Background())
		cmd := &cobra.Command{}
		cmd.SetContext(ctx)
		done := make(chan error, 1)
		go func() { done <- serveCatalog(cmd, config.Catalog{URL: "embedded"}, dataDir, addr, false) }()
		base := "http://" + addr
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := http.Get(base + "/ping")
			if err == nil {
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("catalog serve did not answer: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		fi, err := os.Stat(pwFile)
		if err != nil || fi.Mode().Perm() != secret.FileMode {
			t.Fatalf("password file: %v %v", fi, err)
		}
		pw, err := secret.Read(pwFile)
		if err != nil || (first != "" && pw != first) {
			t.Fatalf("restart %d: password %v, changed: %v", run, err, first != "" && pw != first)
		}
		first = pw
		if di, _ := os.Stat(dataDir); di.Mode().Perm()&^secret.DataDirMode != 0 {
			t.Fatalf("data dir mode %04o", di.Mode().Perm())
		}

		proof := filepath.Join(t.TempDir(), "proof.txt")
		write := "INSERT INTO FUNCTION file('" + proof + "','RawBLOB') SELECT 'cross-site write'"
		for _, hdr := range []map[string]string{
			{"Content-Type": "text/plain", "Origin": "http://evil.example"}, // issue 33's curl
			{}, // a client without the password
		} {
			req, _ := http.NewRequest(http.MethodPost, base+"/", strings.NewReader(write))
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("POST %v: %d %q, want refused", hdr, resp.StatusCode, b)
			}
			if resp.StatusCode == http.StatusUnauthorized && !strings.Contains(string(b), pwFile) {
				t.Errorf("401 does not say where the password is: %q", b)
			}
			if _, err := os.Stat(proof); err == nil {
				t.Fatalf("POST %v wrote %s", hdr, proof)
			}
		}

		// A client loads the password the way a sluice process does.
		t.Setenv("SLUICE_CATALOG_URL", base+"/default")
		t.Setenv("SLUICE_CATALOG_PASSWORD_FILE", pwFile)
		cfg, err := config.Load(filepath.Join(t.TempDir(), "none.yaml"), true)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := catalog.OpenServer(ctx, cfg.Catalog)
		if err != nil {
			t.Fatal(err)
		}
		// Negative control: with the password the same statement writes.
		if err := conn.Exec(ctx, write); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(proof); err != nil {
			t.Fatalf("the authenticated write did not write: %v", err)
		}
		_ = conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
