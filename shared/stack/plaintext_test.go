package stack

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/shared/config"
)

// TestWarnPlaintextPostgres: each Postgres DSN off loopback without
// sslmode=require (source.dsn, source.primary_dsn, state.dsn) is warned
// about once at start, by key and host, never with its user or password;
// one that requires TLS, or stays on loopback, is not (the control).
func TestWarnPlaintextPostgres(t *testing.T) {
	cfg := config.Default()
	cfg.Source.DSN = "postgres://app@standby.example:5432/app?sslmode=require"
	cfg.Source.PrimaryDSN = "postgres://app:hunter2@primary.example:5432/app"
	cfg.State.DSN = "postgres://app@127.0.0.1:5432/app"
	var buf bytes.Buffer
	warnPlaintext(cfg, slog.New(slog.NewTextHandler(&buf, nil)))
	out := buf.String()
	if !strings.Contains(out, "source.primary_dsn reaches Postgres off loopback") || !strings.Contains(out, "host=primary.example") {
		t.Errorf("no warning for source.primary_dsn:\n%s", out)
	}
	for _, leak := range []string{"hunter2", "app@", "source.dsn reaches", "state.dsn reaches"} {
		if strings.Contains(out, leak) {
			t.Errorf("the warnings say %q:\n%s", leak, out)
		}
	}
}
