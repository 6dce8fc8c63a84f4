package config

import (
	"errors"
	"testing"
)

// TestOpenNATSRefused: the embedded NATS server reachable from other hosts
// without NATS auth is refused at start, naming the key; user and password
// (or a token), a loopback address or nats.insecure_no_auth let it start.
// The monitoring endpoint has no auth, so only loopback or
// insecure_no_auth lets it start. A nats.url of a shared server ignores
// both keys.
func TestOpenNATSRefused(t *testing.T) {
	for _, tc := range []struct {
		yaml    string
		user    bool
		token   bool
		wantKey string // "" = accepted
	}{
		{"", false, false, ""}, // defaults: 127.0.0.1:4222 and 127.0.0.1:8222
		{"nats: {listen: '0.0.0.0:4222'}", false, false, "nats.listen"},
		{"nats: {listen: ':4222'}", false, false, "nats.listen"},
		{"nats: {listen: '10.1.2.3:4222'}", false, false, "nats.listen"},
		{"nats: {listen: '0.0.0.0:4222'}", true, false, ""},
		{"nats: {listen: '0.0.0.0:4222'}", false, true, ""},
		{"nats: {listen: '0.0.0.0:4222', insecure_no_auth: true}", false, false, ""},
		{"nats: {listen: 'localhost:0', monitor: '[::1]:0'}", false, false, ""},
		{"nats: {monitor: '0.0.0.0:8222'}", false, false, "nats.monitor"},
		{"nats: {monitor: '0.0.0.0:8222'}", true, false, "nats.monitor"},
		{"nats: {monitor: '0.0.0.0:8222', insecure_no_auth: true}", false, false, ""},
		{"nats: {monitor: ''}", false, false, ""}, // monitoring off
		{"nats: {listen: ''}", false, false, "nats.listen"},
		{"nats: {listen: '127.0.0.1'}", false, false, "nats.listen"},
		{"nats: {monitor: '127.0.0.1:99999'}", false, false, "nats.monitor"},
		{"nats: {url: 'nats://10.0.0.5:4222', listen: '0.0.0.0:4222', monitor: '0.0.0.0:8222'}", false, false, ""},
	} {
		cfg := Default()
		if err := decode([]byte(tc.yaml), &cfg); err != nil {
			t.Fatalf("%s: %v", tc.yaml, err)
		}
		if tc.user {
			cfg.NATS.User, cfg.NATS.Password = "sluice", "pw"
		}
		if tc.token {
			cfg.NATS.Token = "t0k"
		}
		err := cfg.Validate()
		var ke *KeyError
		switch {
		case tc.wantKey == "" && err != nil:
			t.Errorf("%s (user %v, token %v): refused: %v", tc.yaml, tc.user, tc.token, err)
		case tc.wantKey != "" && (!errors.As(err, &ke) || ke.Key != tc.wantKey):
			t.Errorf("%s (user %v, token %v): %v, want a refusal naming %s", tc.yaml, tc.user, tc.token, err, tc.wantKey)
		}
	}
}
