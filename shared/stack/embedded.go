package stack

import (
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/secret"
)

// NATSTokenFile is where `sluice dev` keeps the token its embedded NATS
// server requires when no NATS auth is configured: <data_dir>/nats_token,
// generated on first start, 0600. A client of nats.listen (the nats CLI)
// reads it from there.
func NATSTokenFile(dataDir string) string { return filepath.Join(dataDir, "nats_token") }

// embeddedAuth gives the embedded server a token when the config names no
// NATS auth (and nats.insecure_no_auth is off): loopback is shared by every
// local user and process, and the stream carries every tenant's changes.
// The token is read from NATSTokenFile, generated there on first start,
// and set in cfg, so every in-process client sends it.
func embeddedAuth(cfg *config.Config) error {
	n := &cfg.NATS
	if n.InsecureNoAuth || n.Token != "" || n.User != "" || n.Password != "" || n.Creds != "" {
		return nil
	}
	tok, _, err := secret.ReadOrCreate(NATSTokenFile(cfg.DataDir))
	if err != nil {
		return fmt.Errorf("reading the embedded NATS server's token: %w", err)
	}
	n.Token = tok
	return nil
}

// startEmbeddedNATS starts the embedded server of `sluice dev` on
// nats.listen, with monitoring on nats.monitor (when set) and the NATS
// auth of the config required of clients. A port that is taken falls back
// to a free one, with a log line naming both; port 0 asks for a free one.
func startEmbeddedNATS(cfg config.Config, log *slog.Logger) (*server.Server, error) {
	host, port, err := splitListen(cfg.NATS.Listen)
	if err != nil {
		return nil, fmt.Errorf("reading nats.listen: %w", err)
	}
	// The store is every tenant's changes: the owner's alone (the server
	// would make it 0750).
	if err := secret.PrivateDir(filepath.Join(cfg.DataDir, "nats")); err != nil {
		return nil, err
	}
	opts := natsx.EmbeddedOptions{
		StoreDir:   filepath.Join(cfg.DataDir, "nats"),
		Host:       host,
		Port:       freeOr(log, "nats.listen", host, port),
		MaxPayload: int32(cfg.NATS.MaxPayload),
		SyncAlways: cfg.NATS.SyncAlways,
		User:       cfg.NATS.User,
		Password:   cfg.NATS.Password,
		Token:      cfg.NATS.Token,
	}
	if cfg.NATS.Monitor != "" {
		mhost, mport, err := splitListen(cfg.NATS.Monitor)
		if err != nil {
			return nil, fmt.Errorf("reading nats.monitor: %w", err)
		}
		opts.MonitorHost, opts.MonitorPort = mhost, freeOr(log, "nats.monitor", mhost, mport)
	}
	ns, err := natsx.StartEmbedded(opts)
	if err != nil && (opts.Port > 0 || opts.MonitorPort > 0) {
		// Another process took a probed port in between: once more, on
		// free ports.
		log.Warn("the embedded NATS server did not start on its configured ports; retrying on free ports", "err", err)
		opts.Port = 0
		if opts.MonitorPort != 0 {
			opts.MonitorPort = server.RANDOM_PORT
		}
		ns, err = natsx.StartEmbedded(opts)
	}
	return ns, err
}

func splitListen(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// freeOr returns port when it can be bound on host, and otherwise the
// value that asks the server for a free port (server.RANDOM_PORT), logging
// the fall-back. Port 0 asks for a free port without a log line.
func freeOr(log *slog.Logger, key, host string, port int) int {
	if port == 0 {
		return server.RANDOM_PORT
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		log.Info(key+" is taken; the embedded NATS server uses a free port instead", "wanted", net.JoinHostPort(host, strconv.Itoa(port)), "err", err)
		return server.RANDOM_PORT
	}
	l.Close()
	return port
}
