package stack

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/secret"
)

// TestEmbeddedNATSGeneratedToken: without configured NATS auth, the
// embedded server of `sluice dev` requires a token generated on first
// start into <data_dir>/nats_token (0600): a local client without it is
// refused, one with the file's token connects, the process's own services
// connect (Stack.Connect), and a restart keeps the token. Negative
// control: nats.insecure_no_auth serves it open, as before.
func TestEmbeddedNATSGeneratedToken(t *testing.T) {
	ctx := context.Background()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.NATS.Listen, cfg.NATS.Monitor = "127.0.0.1:0", ""
	var first string
	for run := 0; run < 2; run++ {
		st, err := Open(ctx, cfg, "test", Needs{EmbeddedNATS: true})
		if err != nil {
			t.Fatal(err)
		}
		url := st.NATS.ClientURL()
		if nc, err := nats.Connect(url); err == nil {
			nc.Close()
			t.Fatal("a client without the token connected to the embedded server")
		}
		if di, err := os.Stat(filepath.Join(cfg.DataDir, "nats")); err != nil || di.Mode().Perm() != secret.DirMode {
			t.Fatalf("NATS store directory: %v %v", di, err)
		}
		fi, err := os.Stat(NATSTokenFile(cfg.DataDir))
		if err != nil || fi.Mode().Perm() != secret.FileMode {
			t.Fatalf("token file: %v %v", fi, err)
		}
		tok, err := secret.Read(NATSTokenFile(cfg.DataDir))
		if err != nil || (first != "" && tok != first) {
			t.Fatalf("token %v, changed on restart: %v", err, first != "" && tok != first)
		}
		first = tok
		nc, err := nats.Connect(url, nats.Token(tok))
		if err != nil {
			t.Fatalf("a client with the file's token: %v", err)
		}
		nc.Close()
		if _, _, err := st.Connect(ctx, "router"); err != nil {
			t.Fatalf("an in-process service: %v", err)
		}
		st.Close(ctx)
	}

	cfg.DataDir = t.TempDir()
	cfg.NATS.InsecureNoAuth = true
	st, err := Open(ctx, cfg, "test", Needs{EmbeddedNATS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	nc, err := nats.Connect(st.NATS.ClientURL())
	if err != nil {
		t.Fatalf("insecure_no_auth: %v", err)
	}
	nc.Close()
	if _, err := os.Stat(NATSTokenFile(cfg.DataDir)); err == nil {
		t.Fatal("insecure_no_auth generated a token")
	}
}
