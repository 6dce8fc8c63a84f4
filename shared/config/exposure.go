package config

import (
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/shared/secret"
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

// readCatalogPasswordFile fills catalog.password from catalog.password_file
// when the environment gave no password.
func (c *Config) readCatalogPasswordFile() error {
	if c.Catalog.PasswordFile == "" || c.Catalog.Password != "" {
		return nil
	}
	pw, err := secret.Read(c.Catalog.PasswordFile)
	if err != nil {
		return bad("catalog.password_file", "reading the password: %v", err)
	}
	c.Catalog.Password = pw
	return nil
}

// checkExposure refuses what would expose data by default: an API reachable
// from other hosts without a token, and S3 keys sent in plaintext SQL to a
// remote ClickHouse server.
func (c *Config) checkExposure() error {
	if c.HTTP.Token == "" && c.HTTP.TokenFile == "" && !c.HTTP.InsecureNoAuth && !LoopbackAddr(c.HTTP.Listen) {
		return bad("http.listen", "%s is reachable from other hosts and no token is set: set SLUICE_HTTP_TOKEN (or http.token_file), listen on 127.0.0.1, or set http.insecure_no_auth: true to serve the API open", c.HTTP.Listen)
	}
	if err := c.checkNATSExposure(); err != nil {
		return err
	}
	if c.Packs.TLSCA != "" && !strings.HasPrefix(c.Packs.Endpoint, "https://") {
		return bad("packs.tls_ca", "is set but packs.endpoint %q is not https://", c.Packs.Endpoint)
	}
	if c.Catalog.URL != "embedded" && c.Catalog.Password != "" && !c.Catalog.InsecureNoTLS {
		if host, tls := catalogLink(c.Catalog); !tls && !loopbackHost(host) {
			return bad("catalog.url", "the catalog password would cross the network to %s in plaintext (ClickHouse sends it as is): use https:// or clickhouse://…?secure=true (catalog.tls_ca for a private CA), or set catalog.insecure_no_tls: true", host)
		}
	}
	if err := c.checkNATSTLS(); err != nil {
		return err
	}
	if strings.HasPrefix(c.Packs.URL, "s3://") && c.Packs.AccessKey != "" && c.Catalog.URL != "embedded" && !c.Catalog.InsecureNoTLS {
		if host, tls := catalogLink(c.Catalog); !tls && !loopbackHost(host) {
			return bad("catalog.url", "the catalog's indexing statements carry the pack store's S3 keys and %s is reached without TLS: use https:// or clickhouse://…?secure=true (catalog.tls_ca for a private CA), or set catalog.insecure_no_tls: true", host)
		}
	}
	return nil
}

// checkNATSExposure refuses an embedded NATS server reachable from other
// hosts without auth: a non-loopback nats.listen without nats.user and
// nats.password (or nats.token), and any non-loopback nats.monitor (the
// monitoring endpoint has no auth of its own), unless nats.insecure_no_auth.
func (c *Config) checkNATSExposure() error {
	if c.NATS.URL != "embedded" {
		return nil
	}
	for _, k := range []struct{ key, addr string }{{"nats.listen", c.NATS.Listen}, {"nats.monitor", c.NATS.Monitor}} {
		if k.addr == "" {
			if k.key == "nats.listen" {
				return bad(k.key, "is empty: want host:port (127.0.0.1:0 picks a free port)")
			}
			continue
		}
		if _, port, err := net.SplitHostPort(k.addr); err != nil {
			return bad(k.key, "%q: want host:port", k.addr)
		} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			return bad(k.key, "%q: bad port", k.addr)
		}
	}
	if c.NATS.InsecureNoAuth {
		return nil
	}
	auth := (c.NATS.User != "" && c.NATS.Password != "") || c.NATS.Token != ""
	if !auth && !LoopbackAddr(c.NATS.Listen) {
		return bad("nats.listen", "%s is reachable from other hosts and the embedded NATS server has no auth: set SLUICE_NATS_USER and SLUICE_NATS_PASSWORD (or SLUICE_NATS_TOKEN), listen on 127.0.0.1, or set nats.insecure_no_auth: true", c.NATS.Listen)
	}
	if c.NATS.Monitor != "" && !LoopbackAddr(c.NATS.Monitor) {
		return bad("nats.monitor", "%s is reachable from other hosts and NATS monitoring has no auth: monitor on 127.0.0.1, or set nats.insecure_no_auth: true", c.NATS.Monitor)
	}
	return nil
}

// checkNATSTLS refuses a NATS password or token sent to a server off
// loopback without TLS, unless nats.insecure_no_tls. (A creds file signs a
// challenge: no secret crosses the link.)
func (c *Config) checkNATSTLS() error {
	if c.NATS.URL == "embedded" || c.NATS.InsecureNoTLS || (c.NATS.Password == "" && c.NATS.Token == "") {
		return nil
	}
	if c.NATS.TLSCA != "" || c.NATS.TLSCert != "" {
		return nil
	}
	for _, raw := range strings.Split(c.NATS.URL, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Scheme == "tls" || u.Scheme == "wss" || loopbackHost(u.Hostname()) {
			continue
		}
		return bad("nats.url", "the NATS password or token would cross the network to %s in plaintext: use tls:// (nats.tls_ca for a private CA), or set nats.insecure_no_tls: true", u.Host)
	}
	return nil
}

// PlaintextPostgres names the host of a DSN that reaches Postgres off
// loopback without requiring TLS (sslmode other than require, verify-ca or
// verify-full), or "" — what stack warns about at start: the rows, and
// with Postgres's "password" auth method the password, cross the network
// readable.
func PlaintextPostgres(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Hostname() == "" || loopbackHost(u.Hostname()) || strings.HasPrefix(u.Hostname(), "/") {
		return ""
	}
	switch u.Query().Get("sslmode") {
	case "require", "verify-ca", "verify-full":
		return ""
	}
	return u.Hostname()
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
