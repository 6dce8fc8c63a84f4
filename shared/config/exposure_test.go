package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenAPIRefused: an API reachable from other hosts without a token is
// refused at start, naming http.listen; a token, a loopback address or
// http.insecure_no_auth: true each let it start.
func TestOpenAPIRefused(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		ok   bool
	}{
		{"http: {listen: '0.0.0.0:8080'}", false},
		{"http: {listen: ':8080'}", false},
		{"http: {listen: '[::]:8080'}", false},
		{"http: {listen: '10.1.2.3:8080'}", false},
		{"http: {listen: 'myhost:8080'}", false},
		{"http: {listen: '0.0.0.0:8080', insecure_no_auth: true}", true},
		{"http: {listen: '0.0.0.0:8080', token_file: /run/sluice/token}", true},
		{"http: {listen: '127.0.0.1:8080'}", true},
		{"http: {listen: 'localhost:8080'}", true},
		{"http: {listen: '[::1]:8080'}", true},
		{"", true}, // the default is loopback
	} {
		_, err := Parse([]byte(tc.yaml))
		var ke *KeyError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: refused: %v", tc.yaml, err)
		case !tc.ok && (!errors.As(err, &ke) || ke.Key != "http.listen" || !strings.Contains(err.Error(), "SLUICE_HTTP_TOKEN")):
			t.Errorf("%s: %v, want a refusal naming http.listen and the token", tc.yaml, err)
		}
	}
	// The token from the environment makes the same listen address valid.
	cfg, err := Parse([]byte("http: {listen: '127.0.0.1:8080'}"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP.Listen = "0.0.0.0:8080"
	if err := cfg.Validate(); err == nil {
		t.Fatal("tokenless 0.0.0.0 accepted")
	}
	cfg.HTTP.Token = "t0k"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("with a token: %v", err)
	}
}

// TestTokenFile: Load reads http.token_file when the environment has no
// token; an empty or missing file is refused naming the key.
func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(conf, []byte("http: {listen: '0.0.0.0:8080', token_file: "+tok+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_HTTP_TOKEN", "")
	os.Unsetenv("SLUICE_HTTP_TOKEN")
	cfg, err := Load(conf, false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Token != "s3cret" {
		t.Fatalf("token %q", cfg.HTTP.Token)
	}
	t.Setenv("SLUICE_HTTP_TOKEN", "from-env")
	if cfg, err = Load(conf, false); err != nil || cfg.HTTP.Token != "from-env" {
		t.Fatalf("the environment wins: %q %v", cfg.HTTP.Token, err)
	}
	os.Unsetenv("SLUICE_HTTP_TOKEN")
	for _, content := range []string{"", " \n"} {
		if err := os.WriteFile(tok, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(conf, false); err == nil || !strings.Contains(err.Error(), "http.token_file") {
			t.Errorf("empty token file %q: %v", content, err)
		}
	}
	os.Remove(tok)
	if _, err := Load(conf, false); err == nil || !strings.Contains(err.Error(), "http.token_file") {
		t.Errorf("missing token file: %v", err)
	}
}

// TestS3KeysNeedTLS: with S3 keys, a ClickHouse catalog server off
// loopback must be reached over TLS (the keys travel inside s3() in the
// indexing SQL) unless catalog.insecure_no_tls is set.
func TestS3KeysNeedTLS(t *testing.T) {
	for _, tc := range []struct {
		url, ca  string
		insecure bool
		keys     bool
		ok       bool
	}{
		{url: "clickhouse://ch:9000/sluice", keys: true, ok: false},
		{url: "http://ch:8123/sluice", keys: true, ok: false},
		{url: "clickhouse://ch:9000/sluice?secure=false", keys: true, ok: false},
		{url: "clickhouse://ch:9000/sluice", keys: true, insecure: true, ok: true},
		{url: "clickhouse://ch:9440/sluice?secure=true", keys: true, ok: true},
		{url: "clickhouse://ch:9440/sluice", ca: "/ca.pem", keys: true, ok: true},
		{url: "https://ch:8443/sluice", keys: true, ok: true},
		{url: "clickhouse://127.0.0.1:9000/sluice", keys: true, ok: true},
		{url: "http://localhost:8123/sluice", keys: true, ok: true},
		{url: "clickhouse://ch:9000/sluice", keys: false, ok: true}, // no keys to leak
		{url: "embedded", keys: true, ok: true},
	} {
		cfg := Default()
		cfg.Catalog.URL, cfg.Catalog.TLSCA, cfg.Catalog.InsecureNoTLS = tc.url, tc.ca, tc.insecure
		cfg.Packs.URL = "s3://packs/p"
		if tc.keys {
			cfg.Packs.AccessKey, cfg.Packs.SecretKey = "AKIA", "hunter2"
		}
		err := cfg.Validate()
		var ke *KeyError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%+v: refused: %v", tc, err)
		case !tc.ok && (!errors.As(err, &ke) || ke.Key != "catalog.url" || !strings.Contains(err.Error(), "insecure_no_tls")):
			t.Errorf("%+v: %v, want a refusal naming catalog.url", tc, err)
		case err != nil && strings.Contains(err.Error(), "hunter2"):
			t.Errorf("the refusal leaks the key: %v", err)
		}
	}
}

// TestPacksTLSCA: packs.tls_ca only makes sense for an https:// endpoint.
func TestPacksTLSCA(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		ok   bool
	}{
		{"packs: {url: 's3://b/p', endpoint: 'https://s3:7070', tls_ca: /ca.pem}", true},
		{"packs: {url: 's3://b/p', endpoint: 'http://s3:7070', tls_ca: /ca.pem}", false},
		{"packs: {url: 's3://b/p', endpoint: 'http://s3:7070'}", true},
	} {
		_, err := Parse([]byte(tc.yaml))
		if tc.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "packs.tls_ca")) {
			t.Errorf("%s: %v", tc.yaml, err)
		}
	}
}
