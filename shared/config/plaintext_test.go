package config

import (
	"errors"
	"strings"
	"testing"
)

// TestCredentialsNeedTLS: a catalog password or a NATS password/token is
// not sent to a server off loopback without TLS unless the matching
// insecure_no_tls is set; over TLS, to loopback, with the opt-in, or
// without a credential (the negative controls) it is accepted. A Postgres
// DSN off loopback without sslmode=require or stronger is named for the
// start-up warning.
func TestCredentialsNeedTLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		key  string // "" when accepted
	}{
		{"catalog password over http", func(c *Config) { c.Catalog.URL, c.Catalog.Password = "http://ch:8123/db", "hunter2" }, "catalog.url"},
		{"catalog password over native", func(c *Config) { c.Catalog.URL, c.Catalog.Password = "clickhouse://ch:9000/db", "hunter2" }, "catalog.url"},
		{"catalog password over https", func(c *Config) { c.Catalog.URL, c.Catalog.Password = "https://ch:8443/db", "hunter2" }, ""},
		{"catalog password, secure=true", func(c *Config) { c.Catalog.URL, c.Catalog.Password = "clickhouse://ch:9440/db?secure=true", "hunter2" }, ""},
		{"catalog password to loopback", func(c *Config) { c.Catalog.URL, c.Catalog.Password = "http://127.0.0.1:8123/db", "hunter2" }, ""},
		{"catalog password, insecure_no_tls", func(c *Config) {
			c.Catalog.URL, c.Catalog.Password, c.Catalog.InsecureNoTLS = "http://ch:8123/db", "hunter2", true
		}, ""},
		{"catalog without password", func(c *Config) { c.Catalog.URL = "http://ch:8123/db" }, ""},
		{"nats password over nats://", func(c *Config) { c.NATS.URL, c.NATS.User, c.NATS.Password = "nats://n1:4222", "u", "hunter2" }, "nats.url"},
		{"nats token, one node of a list off loopback", func(c *Config) { c.NATS.URL, c.NATS.Token = "nats://127.0.0.1:4222,nats://n2:4222", "hunter2" }, "nats.url"},
		{"nats token over tls://", func(c *Config) { c.NATS.URL, c.NATS.Token = "tls://n1:4222", "hunter2" }, ""},
		{"nats token with tls_ca", func(c *Config) { c.NATS.URL, c.NATS.Token, c.NATS.TLSCA = "nats://n1:4222", "hunter2", "/ca.pem" }, ""},
		{"nats token to loopback", func(c *Config) { c.NATS.URL, c.NATS.Token = "nats://localhost:4222", "hunter2" }, ""},
		{"nats token, insecure_no_tls", func(c *Config) { c.NATS.URL, c.NATS.Token, c.NATS.InsecureNoTLS = "nats://n1:4222", "hunter2", true }, ""},
		{"nats without credentials", func(c *Config) { c.NATS.URL = "nats://n1:4222" }, ""},
	} {
		cfg := Default()
		tc.set(&cfg)
		err := cfg.Validate()
		var ke *KeyError
		switch {
		case tc.key == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.key != "" && (!errors.As(err, &ke) || ke.Key != tc.key || !strings.Contains(err.Error(), "insecure_no_tls")):
			t.Errorf("%s: %v, want a refusal naming %s and insecure_no_tls", tc.name, err, tc.key)
		case err != nil && strings.Contains(err.Error(), "hunter2"):
			t.Errorf("%s: the refusal leaks the credential: %v", tc.name, err)
		}
	}
	for dsn, want := range map[string]string{
		"postgres://app@db.example:5432/app":                "db.example",
		"postgres://app@db.example/app?sslmode=prefer":      "db.example",
		"postgres://app@db.example/app?sslmode=disable":     "db.example",
		"postgres://app@db.example/app?sslmode=require":     "",
		"postgres://app@db.example/app?sslmode=verify-full": "",
		"postgres://app@127.0.0.1:5432/app?sslmode=disable": "",
		"postgres://app@localhost/app":                      "",
		"":                                                  "",
	} {
		if got := PlaintextPostgres(dsn); got != want {
			t.Errorf("PlaintextPostgres(%q) = %q, want %q", dsn, got, want)
		}
	}
}
