package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/config"
)

// client talks to a running pipeline's HTTP API.
type client struct {
	base  string
	token string
	http  *http.Client
}

func (g *globalFlags) client() (*client, error) {
	base := g.server
	token := os.Getenv("SLUICE_HTTP_TOKEN")
	if base == "" || token == "" {
		// The config names the server and may hold the token
		// (http.token_file); with --server and SLUICE_HTTP_TOKEN it is not
		// needed, and with --server alone a config that does not load only
		// means no token.
		cfg, err := config.Load(g.config, true)
		if err != nil && base == "" {
			return nil, fmt.Errorf("finding the server: %w (or pass --server)", err)
		}
		if err == nil {
			if base == "" {
				base = cfg.HTTP.Listen
			}
			if token == "" {
				token = cfg.HTTP.Token
			}
		}
	}
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return &client{base: strings.TrimRight(base, "/"), token: token, http: &http.Client{Timeout: 5 * time.Minute}}, nil
}

// apiError is an error response of the API.
type apiError struct {
	Status int
	Msg    string
}

func (e *apiError) Error() string { return fmt.Sprintf("server answered %d: %s", e.Status, e.Msg) }

func (c *client) get(ctx context.Context, path string, q url.Values, out any) error {
	return c.do(ctx, http.MethodGet, path, q, nil, out)
}

// do calls the API: method on path?q with body (JSON-encoded when not nil),
// the bearer token when set and, on anything but GET, the client header
// the API requires of state-changing calls. A 200 answer is decoded into
// out (or copied raw into a *[]byte); any other is an *apiError.
func (c *client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if method != http.MethodGet {
		req.Header.Set(api.ClientHeader, "sluice-cli")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("calling %s: %w (is the pipeline running?)", c.base, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 { // 202: an accepted purge
		var e api.Error
		if json.Unmarshal(rb, &e) == nil && e.Error != "" {
			return &apiError{resp.StatusCode, e.Error}
		}
		return &apiError{resp.StatusCode, strings.TrimSpace(string(rb))}
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = rb
		return nil
	}
	if err := json.Unmarshal(rb, out); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}
