package config

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestDefaultsValidate(t *testing.T) {
	cfg := Default()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestParseContractExample(t *testing.T) {
	cfg, err := Parse([]byte(`
source:
  dsn: postgres://app@127.0.0.1:5432/app
  tables: [public.orders, public.customers]
  routing_column: tenant_id
  slot: sluice
  publication: sluice
  backfill: true
destinations:
  mode: auto
nats:
  url: embedded
state:
  dsn: ""
catalog:
  url: embedded
packs:
  url: ""
data_dir: ./.sluice
delivery:
  flush_interval: 5s
  partitions: 16
publisher:
  interval: 1s
http:
  listen: 127.0.0.1:8080
telemetry:
  otlp_endpoint: ""
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Delivery.FlushInterval != 5*time.Second || len(cfg.Source.Tables) != 2 || !cfg.Source.Backfill {
		t.Fatalf("decoded %+v", cfg)
	}
}

func TestRefusals(t *testing.T) {
	cases := []struct{ yaml, key string }{
		{"bogus: 1", "config key bogus: unknown key"},
		{"delivery:\n  flush_intervall: 5s", "config key delivery.flush_intervall: unknown key"},
		{"delivery:\n  flush_interval: soon", "config key delivery.flush_interval: cannot unmarshal"},
		{"source:\n  backfill: maybe", "config key source.backfill"},
		{"delivery:\n  partitions: [1, 2]", "config key delivery.partitions"},
		{"source:\n  tables:\n    - public.a\n    - {x: 1}", "config key source.tables"},
		{"delivery:\n  flush_interval: -5s", "delivery.flush_interval"},
		{"delivery:\n  partitions: 0", "delivery.partitions"},
		{"destinations:\n  mode: every", "destinations.mode"},
		{"source:\n  dsn: postgres://app:secret@h/db\n  tables: [public.t]", "source.dsn"},
		{"source:\n  dsn: postgres://app@h/db\n  tables: [orders]", "source.tables"},
		{"source:\n  dsn: postgres://app@h/db\n  tables: [public.t, public.t]", "source.tables"},
		{"source:\n  dsn: mysql://h/db\n  tables: [public.t]", "source.dsn"},
		{"source:\n  dsn: postgres://app@h/db\n  primary_dsn: mysql://p/db\n  tables: [public.t]", "source.primary_dsn"},
		{"source:\n  primary_dsn: postgres://app@p/db", "source.primary_dsn: set without source.dsn"},
		{"nats:\n  password: hunter2", "nats.password"},
		{"http:\n  token: abc", "http.token"},
		{"catalog:\n  url: mysql://x", "catalog.url"},
		{"catalog:\n  cluster: prod", "catalog.cluster"}, // the embedded catalog has no cluster
		{"catalog:\n  url: http://ch:8123/db\n  cluster: 'a b'", "catalog.cluster"},
		{"nats:\n  url: http://x", "nats.url"},
		{"destinations:\n  mode: list\n  list: {a: 'b.c'}", "destinations.list"},
		{"destinations:\n  mode: list\n  list: {a: '~c4n65'}", "the canonical name of that value is ~c4n64"}, // an alias
		{"telemetry:\n  log_level: loud", "telemetry.log_level"},
		{"telemetry:\n  jaeger_ui: javascript:alert(1)", "telemetry.jaeger_ui"}, // it becomes a link in the UI
		{"telemetry:\n  jaeger_ui: localhost:16686", "telemetry.jaeger_ui"},
		{"telemetry:\n  jaeger_query: localhost:16686", "telemetry.jaeger_query"},
		{"catalog:\n  claims_grace: 1m", "catalog.claims_grace"}, // a claim is never deleted within minutes of its write
		{"catalog:\n  claims_grace: 0s", "catalog.claims_grace"},
		{"source:\n  protocol: 3", "source.protocol"}, // pgoutput versions 1 and 2 only
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.yaml))
		if err == nil {
			t.Errorf("%q was accepted", c.yaml)
			continue
		}
		if !strings.Contains(err.Error(), c.key) {
			t.Errorf("%q: error %q does not name %s", c.yaml, err, c.key)
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: error leaks a credential: %q", c.yaml, err)
		}
	}
}

func TestEnvOverrides(t *testing.T) {
	cfg := Default()
	env := map[string]string{
		"SLUICE_SOURCE_DSN":              "postgres://app:pw@h/db",
		"SLUICE_SOURCE_TABLES":           "public.a, public.b",
		"SLUICE_DELIVERY_FLUSH_INTERVAL": "2s",
		"SLUICE_DELIVERY_PARTITIONS":     "4",
		"SLUICE_NATS_MAX_PAYLOAD":        "16MiB",
		"SLUICE_DATA_DIR":                "/tmp/x",
		"SLUICE_SOURCE_BACKFILL":         "true",
		"SLUICE_HTTP_TOKEN":              "t0k",
	}
	err := applyEnv(&cfg, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal("a password from the environment must be accepted:", err)
	}
	if cfg.Source.DSN != env["SLUICE_SOURCE_DSN"] || len(cfg.Source.Tables) != 2 || cfg.Delivery.FlushInterval != 2*time.Second ||
		cfg.Delivery.Partitions != 4 || cfg.NATS.MaxPayload != 16<<20 || cfg.DataDir != "/tmp/x" || !cfg.Source.Backfill || cfg.HTTP.Token != "t0k" {
		t.Fatalf("overrides not applied: %+v", cfg)
	}
	err = applyEnv(&cfg, func(k string) (string, bool) {
		if k == "SLUICE_DELIVERY_WORKERS" {
			return "many", true
		}
		return "", false
	})
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Key != "delivery.workers" {
		t.Fatalf("a bad override must name its key, got %v", err)
	}
}

func TestEnvNamesCoverEveryKey(t *testing.T) {
	names := EnvNames()
	for _, want := range []string{"SLUICE_SOURCE_DSN", "SLUICE_DELIVERY_FLUSH_INTERVAL", "SLUICE_DATA_DIR", "SLUICE_TELEMETRY_OTLP_ENDPOINT", "SLUICE_HTTP_LISTEN"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("%s is not an override", want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("delivery:\n  flush_interval: 5s\n"))
	f.Add([]byte("source: {dsn: 'postgres://a@b/c', tables: [public.t]}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Parse(b) // must never panic
	})
}

// TestEffectiveClaimsGrace: a claims_grace below nats.max_age counts as
// nats.max_age (a batch can wait in a stream that long), never less.
func TestEffectiveClaimsGrace(t *testing.T) {
	c := Default()
	c.Catalog.ClaimsGrace, c.NATS.MaxAge = time.Hour, 3*time.Hour
	if g := c.Catalog.EffectiveClaimsGrace(c.NATS); g != 3*time.Hour {
		t.Fatalf("grace %s under max_age 3h, want 3h", g)
	}
	c.Catalog.ClaimsGrace = 48 * time.Hour
	if g := c.Catalog.EffectiveClaimsGrace(c.NATS); g != 48*time.Hour {
		t.Fatalf("grace %s, want the configured 48h", g)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("a max_age above the grace is accepted: %v", err)
	}
}

// TestDSNPasswordOnlyFromEnv: a password anywhere in a config-file DSN or
// URL (user info, ?password=, ?sslpassword= in any case, a key/value DSN's
// password=) is refused, naming the environment variable to use and never
// echoing it; the same DSNs from the environment load (negative control),
// and a DSN without a password loads from the file.
func TestDSNPasswordOnlyFromEnv(t *testing.T) {
	for _, tc := range []struct{ key, yaml, env, dsn string }{
		{"source.dsn", "source:\n  tables: [public.t]\n  dsn: ", "SLUICE_SOURCE_DSN", "postgres://app@h/db?password=hunter2"},
		{"source.dsn", "source:\n  tables: [public.t]\n  dsn: ", "SLUICE_SOURCE_DSN", "postgres://app@h/db?sslmode=require&PassWord=hunter2"},
		{"source.dsn", "source:\n  tables: [public.t]\n  dsn: ", "SLUICE_SOURCE_DSN", "postgres://app@h/db?sslpassword=hunter2"},
		{"source.dsn", "source:\n  tables: [public.t]\n  dsn: ", "SLUICE_SOURCE_DSN", "'host=h user=app password=hunter2 dbname=db'"},
		{"state.dsn", "state:\n  dsn: ", "SLUICE_STATE_DSN", "postgresql://app@h/db?password=hunter2"},
		{"source.primary_dsn", "source:\n  tables: [public.t]\n  dsn: postgres://app@standby/db\n  primary_dsn: ", "SLUICE_SOURCE_PRIMARY_DSN", "postgres://app:hunter2@primary/db"},
		{"catalog.url", "catalog:\n  url: ", "SLUICE_CATALOG_PASSWORD", "clickhouse://ch:9000/db?username=u&password=hunter2"},
		{"catalog.url", "catalog:\n  url: ", "SLUICE_CATALOG_PASSWORD", "http://ch:8123/db?password=hunter2"},
	} {
		_, err := Parse([]byte(tc.yaml + tc.dsn))
		if err == nil || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.env) {
			t.Errorf("%s in the file: %v, want refused naming %s and %s", tc.dsn, err, tc.key, tc.env)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error leaks the password: %v", tc.dsn, err)
		}
		if strings.HasPrefix(tc.dsn, "'") {
			continue // a key/value DSN is refused from anywhere (want a URL), but never for its password
		}
		// Negative control: from the environment the same DSN is accepted.
		dir := t.TempDir()
		path := dir + "/sluice.yaml"
		if err := os.WriteFile(path, []byte("source:\n  tables: [public.t]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		envKey := map[string]string{"source.dsn": "SLUICE_SOURCE_DSN", "state.dsn": "SLUICE_STATE_DSN", "catalog.url": "SLUICE_CATALOG_URL", "source.primary_dsn": "SLUICE_SOURCE_PRIMARY_DSN"}[tc.key]
		if tc.key == "source.primary_dsn" {
			t.Setenv("SLUICE_SOURCE_DSN", "postgres://app@standby/db") // primary_dsn alone is refused
		}
		t.Setenv(envKey, strings.Trim(tc.dsn, "'"))
		if _, err := Load(path, false); err != nil {
			t.Errorf("%s from %s: %v", tc.dsn, envKey, err)
		}
		os.Unsetenv(envKey)
	}
	if _, err := Parse([]byte("source:\n  tables: [public.t]\n  dsn: postgres://app@h/db?sslmode=require")); err != nil {
		t.Fatalf("a DSN without a password: %v", err)
	}
}
