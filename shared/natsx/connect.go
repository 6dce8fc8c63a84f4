package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/shared/config"
)

// ConnectLogger is where Connect reports disconnects and reconnects
// (default slog.Default()). Credentials are never logged.
var ConnectLogger func() *slog.Logger = slog.Default

// Connect connects to NATS at url (cfg.URL when url is ""), named name, with
// the credentials and TLS settings of cfg, reconnecting forever with capped
// backoff. It retries the first connection while no server answers, until
// ctx ends. It returns the connection and a JetStream context on it.
func Connect(ctx context.Context, cfg config.NATS, url, name string) (*nats.Conn, jetstream.JetStream, error) {
	if url == "" {
		url = cfg.URL
	}
	if url == "" || url == "embedded" {
		return nil, nil, fmt.Errorf("connecting to NATS: url %q: pass the embedded server's ClientURL()", url)
	}
	log := ConnectLogger().With("nats_url", redact(url), "client", name)
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			return Backoff(min(attempts, 6)) // ~100ms .. 3.2s
		}),
		nats.Timeout(5 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "server", redact(nc.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("nats async error", "subject", subj, "error", err)
		}),
	}
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
	if cfg.User != "" || cfg.Password != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	for attempt := 1; ; attempt++ {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			js, err := jetstream.New(nc)
			if err != nil {
				nc.Close()
				return nil, nil, fmt.Errorf("creating JetStream context on %s: %w", redact(url), err)
			}
			return nc, js, nil
		}
		if !errors.Is(err, nats.ErrNoServers) {
			return nil, nil, fmt.Errorf("connecting to NATS at %s: %w", redact(url), err)
		}
		if attempt == 1 {
			log.Warn("nats not reachable yet, retrying", "error", err)
		}
		if !Sleep(ctx, Backoff(min(attempt, 6))) {
			return nil, nil, fmt.Errorf("connecting to NATS at %s: %w (last error: %v)", redact(url), ctx.Err(), err)
		}
	}
}

// redact removes user info from every URL of a comma-separated list.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "<unparseable url>"
			continue
		}
		if u.User != nil {
			u.User = url.User("redacted")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
