package chdbhttp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/chdbhttp"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
)

// TestGetIsReadOnly: a GET runs with readonly = 1, as ClickHouse's HTTP
// interface does: it cannot write a file, read a host file through file()
// or url(), change the catalog, or escape through a second statement or a
// SETTINGS clause; reads still work, and the same write by POST (the
// negative control) does write.
func TestGetIsReadOnly(t *testing.T) {
	base := chtest.ShimURL(t)
	db := chtest.Database(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "pwned.csv")
	write := "INSERT INTO FUNCTION file('" + target + "', 'CSV', 'x UInt8') SELECT 1"
	readPasswd := "SELECT * FROM file('/etc/passwd', 'LineAsString')"
	for _, q := range []string{
		write,
		readPasswd,
		"SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString')",
		"SELECT 1; " + write,
		"SELECT * FROM (" + readPasswd + " SETTINGS readonly = 0)",
		"SELECT * FROM (" + readPasswd + ") SETTINGS readonly = 0",
		"WITH (SELECT count() FROM file('/etc/passwd', 'LineAsString') SETTINGS readonly = 0) AS c SELECT c",
		"CREATE TABLE " + db + ".t (x UInt8) ENGINE = Memory",
		"SET readonly = 0",
		"SELECT 1 INTO OUTFILE '" + target + "'",
		"select 1 into   outfile '" + target + "' TRUNCATE",
		"SYSTEM DROP MARK CACHE",
		"OPTIMIZE TABLE system.one",
	} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			req, _ := http.NewRequest(method, base+"/?query="+url.QueryEscape(q), nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body strings.Builder
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body.Write(b)
			if resp.StatusCode == http.StatusOK || strings.Contains(body.String(), "root:") {
				t.Errorf("%s %q: %d %q, want refused", method, q, resp.StatusCode, body.String())
			}
		}
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatalf("a GET wrote %s", target)
	}
	// Still refused with readonly=0 as a URL parameter.
	if code, _, body := get(t, base+"/?readonly=0&query="+url.QueryEscape(readPasswd)); code == 200 || strings.Contains(body, "root:") {
		t.Fatalf("readonly=0 parameter: %d %q", code, body)
	}
	// Reads work, settings as URL parameters included.
	if code, _, body := get(t, base+"/?max_threads=1&query="+url.QueryEscape("SELECT getSetting('readonly'), 1 + 1")); code != 200 || body != "1\t2\n" {
		t.Fatalf("a read by GET: %d %q", code, body)
	}
	if code, _, body := get(t, base+"/?query="+url.QueryEscape("SELECT 1 FORMAT JSONEachRow")); code != 200 || body != "{\"1\":1}\n" {
		t.Fatalf("a read with its own FORMAT: %d %q", code, body)
	}
	if code, _, body := get(t, base+"/?database="+db+"&query="+url.QueryEscape("SHOW TABLES")); code != 200 {
		t.Fatalf("SHOW TABLES by GET: %d %q", code, body)
	}
	// Negative control: the same write by POST writes.
	resp, err := http.Post(base+"/", "application/octet-stream", strings.NewReader(write))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST write: %d", resp.StatusCode)
	}
	if _, err := os.Stat(target); err != nil {
		t.Fatalf("the POST did not write: %v", err)
	}
}

// TestCredentialsOffLoopback: the catalog refuses to serve without
// credentials anywhere unless insecure, and insecure only on loopback;
// with credentials, a write without them is refused; and without
// credentials on loopback a request naming another Host (DNS rebinding) is
// refused.
func TestCredentialsOffLoopback(t *testing.T) {
	wild := &net.TCPAddr{IP: net.IPv4zero, Port: 8123}
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8123}
	for _, addr := range []net.Addr{wild, loop} {
		if err := chdbhttp.CheckListen(addr, chdbhttp.Options{}); !errors.Is(err, httpx.ErrNoAuth) || !strings.Contains(err.Error(), "SLUICE_CATALOG_PASSWORD") {
			t.Fatalf("no credentials on %s: %v", addr, err)
		}
		if err := chdbhttp.CheckListen(addr, chdbhttp.Options{User: "u", Password: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := chdbhttp.CheckListen(wild, chdbhttp.Options{InsecureNoAuth: true}); !errors.Is(err, chdbhttp.ErrInsecureOffLoopback) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("--insecure-no-auth on 0.0.0.0: %v", err)
	}
	// Negative control: the flag on loopback serves.
	if err := chdbhttp.CheckListen(loop, chdbhttp.Options{InsecureNoAuth: true}); err != nil {
		t.Fatal(err)
	}

	e := chtest.Engine(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- chdbhttp.Serve(ctx, ln, chdbhttp.New(e, chdbhttp.Options{User: "u", Password: "p"})) }()
	defer func() { cancel(); <-done }()
	base := "http://" + ln.Addr().String()
	resp, err := http.Post(base+"/", "application/octet-stream", strings.NewReader("CREATE DATABASE IF NOT EXISTS nope"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST without credentials: %d", resp.StatusCode)
	}
	// clickhouse-go (it POSTs) with the credentials keeps working.
	conn, err := catalog.OpenServer(ctx, config.Catalog{URL: base + "/default", User: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()

	// Tokenless loopback: the Host must name loopback.
	req, _ := http.NewRequest(http.MethodGet, chtest.ShimURL(t)+"/?query=SELECT+1", nil)
	req.Host = "attacker.example"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("rebinding Host: %d, want 403", resp.StatusCode)
	}
}
