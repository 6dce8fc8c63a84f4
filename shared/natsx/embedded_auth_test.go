package natsx

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// TestEmbeddedAuth: with User and Password (or Token) the embedded server
// refuses a client without them and accepts one with them; without either
// it accepts any client.
func TestEmbeddedAuth(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts EmbeddedOptions
		good nats.Option
	}{
		{"user", EmbeddedOptions{User: "sluice", Password: "pw"}, nats.UserInfo("sluice", "pw")},
		{"token", EmbeddedOptions{Token: "t0k"}, nats.Token("t0k")},
		{"none", EmbeddedOptions{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.StoreDir = t.TempDir()
			s, err := StartEmbedded(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { s.Shutdown(); s.WaitForShutdown() }()
			nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(0))
			if tc.good == nil {
				if err != nil {
					t.Fatalf("no auth configured, a plain client was refused: %v", err)
				}
				nc.Close()
				return
			}
			if err == nil {
				nc.Close()
				t.Fatal("a client without credentials was accepted")
			}
			nc, err = nats.Connect(s.ClientURL(), nats.MaxReconnects(0), tc.good)
			if err != nil {
				t.Fatalf("a client with the credentials was refused: %v", err)
			}
			nc.Close()
		})
	}
}
