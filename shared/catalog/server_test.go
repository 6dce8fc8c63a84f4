package catalog

import (
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/shared/config"
)

func TestServerOptions(t *testing.T) {
	for _, tc := range []struct {
		url     string
		http    bool
		tls     bool
		db, err string
	}{
		{url: "clickhouse://h:9000/cat", db: "cat"},
		{url: "clickhouse://h:9440/cat?secure=true", db: "cat", tls: true},
		{url: "http://h:8123/cat", http: true, db: "cat"},
		{url: "https://h:8443/cat", http: true, tls: true, db: "cat"},
		{url: "ftp://h/cat", err: "scheme"},
	} {
		opt, err := ServerOptions(config.Catalog{URL: tc.url, User: "u", Password: "p"})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.url, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if (opt.Protocol == 1) != tc.http || (opt.TLS != nil) != tc.tls || opt.Auth.Database != tc.db || opt.Auth.Username != "u" || opt.Auth.Password != "p" {
			t.Errorf("%s: protocol %v tls %v db %q auth %q", tc.url, opt.Protocol, opt.TLS != nil, opt.Auth.Database, opt.Auth.Username)
		}
	}
	if _, err := ServerOptions(config.Catalog{URL: "clickhouse://h:9000/x", TLSCA: "/nonexistent.pem"}); err == nil {
		t.Error("unreadable tls_ca accepted")
	}
}
