package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

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
	if base == "" {
		cfg, err := config.Load(g.config, true)
		if err != nil {
			return nil, fmt.Errorf("finding the server: %w (or pass --server)", err)
		}
		base = cfg.HTTP.Listen
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
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("calling %s: %w (is `sluice dev` running?)", c.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return &apiError{resp.StatusCode, e.Error}
		}
		return &apiError{resp.StatusCode, strings.TrimSpace(string(body))}
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = body
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}
