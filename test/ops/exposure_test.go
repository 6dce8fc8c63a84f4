package ops

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// publicPorts are the host ports compose may publish on every interface:
// the console's UI and API, which users must reach and which requires the
// generated token.
var publicPorts = map[string]bool{"console 8080:8080": true}

// exposureProblems lists every host port of c published beyond
// 127.0.0.1 that publicPorts does not allow.
func exposureProblems(c composeFile) []string {
	var out []string
	for name, s := range c.Services {
		for _, p := range s.Ports {
			ps, ok := p.(string)
			if !ok {
				out = append(out, name+": a long-syntax port entry this test cannot judge")
				continue
			}
			if strings.HasPrefix(ps, "127.0.0.1:") || publicPorts[name+" "+ps] {
				continue
			}
			out = append(out, name+" publishes "+ps+" on every interface")
		}
	}
	return out
}

// TestComposePublishesOnLoopback: NATS, Postgres, ClickHouse, the S3 store
// and the observability stack publish their host ports on 127.0.0.1 only;
// only the token-guarded console is on every interface. Negative control:
// the file as it was (Postgres on "5432:5432") is caught.
func TestComposePublishesOnLoopback(t *testing.T) {
	c := loadCompose(t, []byte(interpolate(string(read(t, "compose.yaml")))))
	for _, p := range exposureProblems(c) {
		t.Error(p)
	}
	for _, svc := range []string{"nats", "postgres", "clickhouse", "s3"} {
		if len(c.Services[svc].Ports) == 0 {
			t.Errorf("%s publishes no port: the check above checked nothing", svc)
		}
	}
	pg := c.Services["postgres"]
	pg.Ports = []any{"5432:5432"}
	c.Services["postgres"] = pg
	if got := exposureProblems(c); len(got) != 1 || !strings.Contains(got[0], "postgres") {
		t.Fatalf("negative control: %q, want the open Postgres port", got)
	}
}

// TestComposeTokenFileMode runs the `token` one-shot's own command (with
// the volume's /run/sluice mapped to a temporary directory): the token is
// written 0600 owned by the sluice images' user (65532), Prometheus's copy
// 0600 owned by nobody (65534), a second run keeps the token, and a token
// file left 0644 by an older compose file is narrowed to 0600.
func TestComposeTokenFileMode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the one-shot chowns its files, as root does in its container")
	}
	c := loadCompose(t, read(t, "compose.yaml"))
	cmd, ok := c.Services["token"].Command.([]any)
	if !ok || len(cmd) != 1 {
		t.Fatalf("token command %v: want one shell string", c.Services["token"].Command)
	}
	dir := t.TempDir()
	script := strings.ReplaceAll(interpolate(cmd[0].(string)), "/run/sluice", dir)
	run := func() {
		t.Helper()
		if out, err := exec.Command("/bin/sh", "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("token one-shot: %v\n%s", err, out)
		}
	}
	check := func(name string, uid uint32) []byte {
		t.Helper()
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %04o, want 0600", name, fi.Mode().Perm())
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid {
			t.Errorf("%s: owner %d, want %d", name, st.Uid, uid)
		}
		b, _ := os.ReadFile(p)
		if len(strings.TrimSpace(string(b))) != 64 {
			t.Errorf("%s: %q, want 64 hex digits", name, b)
		}
		return b
	}
	run()
	tok := check("http_token", 65532)
	if prom := check("prometheus_token", 65534); string(prom) != string(tok) {
		t.Fatal("Prometheus's copy differs from the token")
	}
	if err := os.Chmod(filepath.Join(dir, "http_token"), 0o644); err != nil {
		t.Fatal(err)
	}
	run()
	if again := check("http_token", 65532); string(again) != string(tok) {
		t.Fatal("a second run replaced the token")
	}
}
