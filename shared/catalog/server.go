package catalog

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluice-cdc/sluice/shared/catalog/chdb"
	"github.com/sluice-cdc/sluice/shared/config"
)

// Server is a catalog.Conn on a ClickHouse server through clickhouse-go/v2:
// clickhouse://host:9000/db (native protocol) or http(s)://host:8123/db (HTTP
// protocol). It is safe for concurrent use (clickhouse-go pools
// connections).
type Server struct {
	conn driver.Conn
	url  string // without credentials, for messages
}

var _ Conn = (*Server)(nil)

// ServerOptions turns the catalog configuration into clickhouse-go options.
// User and password come from the config (filled from the environment only);
// secure=true in the URL, https://, or catalog.tls_ca turn TLS on.
func ServerOptions(cfg config.Catalog) (*clickhouse.Options, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parsing catalog.url: %w", err)
	}
	q := u.Query()
	switch u.Scheme {
	case "clickhouse", "http":
		if cfg.TLSCA != "" && q.Get("secure") == "" {
			if u.Scheme == "http" {
				return nil, fmt.Errorf("catalog.tls_ca is set but catalog.url is http://: use https://")
			}
			q.Set("secure", "true")
		}
	case "https":
		if q.Get("secure") == "" {
			q.Set("secure", "true")
		}
	default:
		return nil, fmt.Errorf("catalog.url scheme %q: want clickhouse, http or https", u.Scheme)
	}
	u.RawQuery = q.Encode()
	opt, err := clickhouse.ParseDSN(u.String())
	if err != nil {
		return nil, fmt.Errorf("parsing catalog.url: %w", err)
	}
	if cfg.User != "" {
		opt.Auth.Username = cfg.User
	}
	if cfg.Password != "" {
		opt.Auth.Password = cfg.Password
	}
	if cfg.TLSCA != "" {
		pem, err := os.ReadFile(cfg.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("reading catalog.tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("catalog.tls_ca %s: no PEM certificates", cfg.TLSCA)
		}
		if opt.TLS == nil {
			opt.TLS = &tls.Config{}
		}
		opt.TLS.RootCAs = pool
	}
	if opt.DialTimeout == 0 {
		opt.DialTimeout = 10 * time.Second
	}
	return opt, nil
}

// OpenServer connects to a ClickHouse server and pings it.
func OpenServer(ctx context.Context, cfg config.Catalog) (*Server, error) {
	opt, err := ServerOptions(cfg)
	if err != nil {
		return nil, err
	}
	conn, err := clickhouse.Open(opt)
	if err != nil {
		return nil, fmt.Errorf("opening clickhouse %s: %w", redactURL(cfg.URL), err)
	}
	s := &Server{conn: conn, url: redactURL(cfg.URL)}
	if err := conn.Ping(ctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("connecting to clickhouse %s: %w", s.url, serverErr(err))
	}
	return s, nil
}

// Exec runs a statement that returns no rows.
func (s *Server) Exec(ctx context.Context, query string) error {
	if err := s.conn.Exec(ctx, query); err != nil {
		return serverErr(err)
	}
	return nil
}

// Query runs a statement and returns its normalized rows.
func (s *Server) Query(ctx context.Context, query string) (*Result, error) {
	rows, err := s.conn.Query(ctx, query)
	if err != nil {
		return nil, serverErr(err)
	}
	defer rows.Close()
	cts := rows.ColumnTypes()
	res := &Result{Columns: make([]string, len(cts)), Types: make([]string, len(cts))}
	for i, ct := range cts {
		res.Columns[i] = ct.Name()
		res.Types[i] = ct.DatabaseTypeName()
	}
	dest := make([]any, len(cts))
	for rows.Next() {
		for i, ct := range cts {
			dest[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("scanning result of %s: %w", abbrev(query), err)
		}
		row := make([]any, len(cts))
		for i := range dest {
			row[i] = chdb.Normalize(reflect.ValueOf(dest[i]).Elem().Interface(), res.Types[i])
		}
		res.Rows = append(res.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return nil, serverErr(err)
	}
	return res, nil
}

// Close closes the connection pool.
func (s *Server) Close() error { return s.conn.Close() }

// serverErr maps a clickhouse-go exception to *Exception.
func serverErr(err error) error {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		return &Exception{Code: int(ex.Code), Message: fmt.Sprintf("Code: %d. %s", ex.Code, ex.Message)}
	}
	return err
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}

// abbrev shortens a statement for an error message.
func abbrev(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 80 {
		return q[:77] + "..."
	}
	return q
}
