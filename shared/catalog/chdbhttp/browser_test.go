package chdbhttp_test

import (
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/chdbhttp"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
)

// serveWith runs a handler with opts over the test engine on loopback and
// returns its base URL.
func serveWith(t *testing.T, opts chdbhttp.Options) string {
	t.Helper()
	e := chtest.Engine(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- chdbhttp.Serve(ctx, ln, chdbhttp.New(e, opts)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + ln.Addr().String()
}

func post(t *testing.T, base, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/", strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCrossSiteWriteRefused is issue 33's reproduction: a web page on
// another site POSTs text/plain SQL to the catalog (no preflight is needed
// for that), and before the fix an INSERT INTO FUNCTION file() wrote a file.
// Every browser-shaped request is refused and writes nothing, on a server
// with credentials (the browser may hold cached Basic credentials) and on
// an --insecure-no-auth one alike; a client request (no Origin, no
// Sec-Fetch-*, an X-ClickHouse-* header or a non-form content type) with
// the credentials writes (the negative control: the statement does write
// when it is let through).
func TestCrossSiteWriteRefused(t *testing.T) {
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:p"))
	for _, tc := range []struct {
		name string
		opts chdbhttp.Options
		auth map[string]string // what a legitimate client sends
	}{
		{"credentials", chdbhttp.Options{User: "u", Password: "p"}, map[string]string{"Authorization": basic}},
		{"insecure-no-auth", chdbhttp.Options{InsecureNoAuth: true}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := serveWith(t, tc.opts)
			dir := t.TempDir()
			n := 0
			write := func() (string, string) {
				n++
				p := filepath.Join(dir, "proof"+strings.Repeat("x", n)+".txt")
				return p, "INSERT INTO FUNCTION file('" + p + "','RawBLOB') SELECT 'cross-site write'"
			}
			with := func(extra map[string]string) map[string]string {
				m := map[string]string{}
				for k, v := range tc.auth {
					m[k] = v
				}
				for k, v := range extra {
					m[k] = v
				}
				return m
			}
			for _, bad := range []struct {
				what string
				hdr  map[string]string
			}{
				// The reproduction itself: no credentials at all.
				{"curl of issue 33", map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"}},
				// Each browser mark alone, with the credentials a browser may
				// have cached.
				{"Origin", with(map[string]string{"Content-Type": "application/octet-stream", "Origin": "http://evil.example"})},
				{"Origin null", with(map[string]string{"Origin": "null"})},
				{"Sec-Fetch-Site cross-site", with(map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"})},
				{"Sec-Fetch-Site same-site", with(map[string]string{"Sec-Fetch-Site": "same-site"})},
				{"text/plain", with(map[string]string{"Content-Type": "text/plain;charset=UTF-8"})},
				{"form", with(map[string]string{"Content-Type": "application/x-www-form-urlencoded"})},
				{"multipart form", with(map[string]string{"Content-Type": "multipart/form-data; boundary=x"})},
			} {
				path, q := write()
				code, body := post(t, base, q, bad.hdr)
				if code != http.StatusForbidden {
					t.Errorf("%s: %d %q, want 403", bad.what, code, body)
				}
				if _, err := os.Stat(path); err == nil {
					t.Errorf("%s: the statement wrote %s", bad.what, path)
				}
			}
			// Negative controls: a client's requests are served and write.
			for _, good := range []struct {
				what string
				hdr  map[string]string
			}{
				{"no Content-Type", with(nil)},
				{"octet-stream", with(map[string]string{"Content-Type": "application/octet-stream"})},
				{"Sec-Fetch-Site none (typed by the user)", with(map[string]string{"Sec-Fetch-Site": "none"})},
				{"text/plain with an X-ClickHouse header", with(map[string]string{"Content-Type": "text/plain", "X-ClickHouse-Format": "TabSeparated"})},
			} {
				path, q := write()
				if code, body := post(t, base, q, good.hdr); code != http.StatusOK {
					t.Errorf("%s: %d %q, want 200", good.what, code, body)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: did not write: %v", good.what, err)
				}
			}
			// clickhouse-go (it POSTs, with X-ClickHouse-User/Key) works.
			conn, err := catalog.OpenServer(context.Background(), config.Catalog{URL: base + "/default", User: tc.opts.User, Password: tc.opts.Password})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := conn.Exec(context.Background(), "SELECT 1"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
