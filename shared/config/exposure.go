package config

import (
	"net"
	"net/url"
	"os"
	"strings"
)

// readTokenFile fills http.token from http.token_file when the environment
// gave no token.
func (c *Config) readTokenFile() error {
	if c.HTTP.TokenFile == "" || c.HTTP.Token != "" {
		return nil
	}
	b, err := os.ReadFile(c.HTTP.TokenFile)
	if err != nil {
		return bad("http.token_file", "reading the token: %v", err)
	}
	c.HTTP.Token = strings.TrimSpace(string(b))
	if c.HTTP.Token == "" {
		return bad("http.token_file", "%s is empty", c.HTTP.TokenFile)
	}
	return nil
}

// checkExposure refuses what would expose data by default: an API reachable
// from other hosts without a token, and S3 keys sent in plaintext SQL to a
// remote ClickHouse server.
func (c *Config) checkExposure() error {
	if c.HTTP.Token == "" && c.HTTP.TokenFile == "" && !c.HTTP.InsecureNoAuth && !LoopbackAddr(c.HTTP.Listen) {
		return bad("http.listen", "%s is reachable from other hosts and no token is set: set SLUICE_HTTP_TOKEN (or http.token_file), listen on 127.0.0.1, or set http.insecure_no_auth: true to serve the API open", c.HTTP.Listen)
	}
	if c.Packs.TLSCA != "" && !strings.HasPrefix(c.Packs.Endpoint, "https://") {
		return bad("packs.tls_ca", "is set but packs.endpoint %q is not https://", c.Packs.Endpoint)
	}
	if strings.HasPrefix(c.Packs.URL, "s3://") && c.Packs.AccessKey != "" && c.Catalog.URL != "embedded" && !c.Catalog.InsecureNoTLS {
		if host, tls := catalogLink(c.Catalog); !tls && !loopbackHost(host) {
			return bad("catalog.url", "the catalog's indexing statements carry the pack store's S3 keys and %s is reached without TLS: use https:// or clickhouse://…?secure=true (catalog.tls_ca for a private CA), or set catalog.insecure_no_tls: true", host)
		}
	}
	return nil
}

// catalogLink returns the catalog server's host and whether sluice reaches
// it over TLS.
func catalogLink(cat Catalog) (host string, tls bool) {
	u, err := url.Parse(cat.URL)
	if err != nil {
		return "", false
	}
	secure := u.Query().Get("secure")
	return u.Hostname(), u.Scheme == "https" || secure == "true" || secure == "1" ||
		(u.Scheme == "clickhouse" && cat.TLSCA != "" && secure == "")
}

// LoopbackAddr reports whether a listen address (host:port) names only the
// local machine: localhost or a loopback IP. An empty host (every
// interface), another name or an unparsable address is not loopback.
func LoopbackAddr(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	return err == nil && loopbackHost(host)
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
