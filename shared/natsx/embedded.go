package natsx

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedOptions configure the in-process NATS server.
type EmbeddedOptions struct {
	StoreDir   string // JetStream file store directory (required)
	Host       string // default 127.0.0.1
	Port       int    // 0 = random
	MaxPayload int32  // server max_payload; 0 = server default (1 MB)
	SyncAlways bool   // fsync every write (sync_interval: always)
	// MonitorPort serves /varz, /jsz, /connz on this port when > 0, on a
	// free port when -1 (server.RANDOM_PORT); 0 = off. MonitorHost
	// defaults to Host.
	MonitorPort int
	MonitorHost string
	// User and Password, or Token, are required of every client when set.
	User, Password, Token string
	// MaxStore caps JetStream file storage (max_file_store); 0 = the
	// server default (75% of the free disk). Streams reserve their
	// MaxBytes against it, so it must cover 4 x nats.max_bytes.
	MaxStore int64
	// Debug turns on the server's own logging (to stderr).
	Debug bool
	// ReadyTimeout bounds the wait for the server to accept connections
	// (default 10s).
	ReadyTimeout time.Duration
}

// StartEmbedded starts a NATS server in this process with JetStream on a
// file store and waits until it accepts connections. Stop it with
// s.Shutdown() and s.WaitForShutdown(). s.ClientURL() is its URL.
func StartEmbedded(opts EmbeddedOptions) (*server.Server, error) {
	if opts.StoreDir == "" {
		return nil, fmt.Errorf("starting embedded NATS: StoreDir is required")
	}
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := opts.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	so := &server.Options{
		ServerName: "sluice-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   opts.StoreDir,
		MaxPayload: opts.MaxPayload,
		SyncAlways: opts.SyncAlways,
		NoLog:      !opts.Debug,
		NoSigs:     true,
		Debug:      opts.Debug,
	}
	if opts.MaxPayload > 0 && int64(opts.MaxPayload) > server.MAX_PENDING_SIZE {
		so.MaxPending = int64(opts.MaxPayload)
	}
	if opts.MaxStore > 0 {
		so.JetStreamMaxStore = opts.MaxStore
	}
	if opts.MonitorPort > 0 || opts.MonitorPort == server.RANDOM_PORT {
		so.HTTPHost = host
		if opts.MonitorHost != "" {
			so.HTTPHost = opts.MonitorHost
		}
		so.HTTPPort = opts.MonitorPort
	}
	if opts.User != "" {
		so.Username, so.Password = opts.User, opts.Password
	} else if opts.Token != "" {
		so.Authorization = opts.Token
	}
	s, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("starting embedded NATS: %w", err)
	}
	if opts.Debug {
		s.ConfigureLogger()
	}
	s.Start()
	wait := opts.ReadyTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if !s.ReadyForConnections(wait) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("starting embedded NATS on %s:%d: %w within %s", host, opts.Port, ErrEmbeddedNotReady, wait)
	}
	return s, nil
}
