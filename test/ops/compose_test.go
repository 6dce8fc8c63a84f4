package ops

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image         string            `yaml:"image"`
	Build         *composeBuild     `yaml:"build"`
	ContainerName string            `yaml:"container_name"`
	Ports         []any             `yaml:"ports"`
	Expose        []any             `yaml:"expose"`
	Environment   map[string]string `yaml:"environment"`
	Volumes       []any             `yaml:"volumes"`
	Command       any               `yaml:"command"`
	Profiles      []string          `yaml:"profiles"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
	Target     string `yaml:"target"`
}

func loadCompose(t *testing.T, b []byte) composeFile {
	t.Helper()
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("parsing compose YAML: %v", err)
	}
	return c
}

// interpolate applies compose's ${VAR:-default} / ${VAR} / $${...} rules
// with an empty environment.
var interpRe = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:?-([^}]*))?\}`)

func interpolate(s string) string {
	return interpRe.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		sm := interpRe.FindStringSubmatch(m)
		return sm[3]
	})
}

// scalable is every service `docker compose up --scale` must be able to
// replicate.
var scalable = []string{"reader", "router", "flusher", "indexer", "publisher"}

func checkScalable(t *testing.T, c composeFile, where string) {
	t.Helper()
	for _, p := range scalableProblems(c) {
		t.Errorf("%s: %s", where, p)
	}
}

// scalableProblems lists what stops a scalable service from running as
// several replicas.
func scalableProblems(c composeFile) []string {
	var out []string
	for _, name := range scalable {
		s, ok := c.Services[name]
		if !ok {
			out = append(out, "service "+name+" is missing")
			continue
		}
		if s.ContainerName != "" {
			out = append(out, fmt.Sprintf("service %s has container_name %q: it could not be scaled", name, s.ContainerName))
		}
		if len(s.Ports) > 0 {
			out = append(out, fmt.Sprintf("service %s publishes host ports %v: a second replica could not bind them", name, s.Ports))
		}
	}
	return out
}

// TestScalableNegativeControl shows the check catches a fixed container
// name and a host port on a scaled service.
func TestScalableNegativeControl(t *testing.T) {
	c := loadCompose(t, []byte(interpolate(string(read(t, "compose.yaml")))))
	f := c.Services["flusher"]
	f.ContainerName = "flusher"
	c.Services["flusher"] = f
	r := c.Services["router"]
	r.Ports = []any{"8081:8080"}
	c.Services["router"] = r
	if got := scalableProblems(c); len(got) != 2 {
		t.Fatalf("want 2 problems, got %q", got)
	}
}

// TestComposeStructure checks compose.yaml without any CLI: the scalable
// services, the images built from deploy/Dockerfile, the infrastructure,
// the mounted files and the SLUICE_* variables.
func TestComposeStructure(t *testing.T) {
	raw := read(t, "compose.yaml")
	c := loadCompose(t, []byte(interpolate(string(raw))))
	checkScalable(t, c, "compose.yaml")

	dockerfile := string(read(t, "deploy", "Dockerfile"))
	for _, name := range pipelineServices {
		s := c.Services[name]
		if s.Build == nil || s.Build.Dockerfile != "deploy/Dockerfile" || s.Build.Target != name || s.Build.Context != "." {
			t.Errorf("service %s: build %+v, want context . dockerfile deploy/Dockerfile target %s", name, s.Build, name)
			continue
		}
		if !regexp.MustCompile(`(?m)^FROM \S+ AS ` + name + `$`).MatchString(dockerfile) {
			t.Errorf("service %s: deploy/Dockerfile has no stage %q", name, name)
		}
		if s.Environment["SLUICE_HTTP_LISTEN"] != "0.0.0.0:8080" {
			t.Errorf("service %s: SLUICE_HTTP_LISTEN = %q, want 0.0.0.0:8080", name, s.Environment["SLUICE_HTTP_LISTEN"])
		}
	}
	for _, infra := range []string{"nats", "nats-exporter", "postgres", "clickhouse", "s3", "jaeger", "prometheus", "grafana", "traffic", "console"} {
		if _, ok := c.Services[infra]; !ok {
			t.Errorf("service %s is missing", infra)
		}
	}
	hasPort := func(svc, port string) bool {
		for _, p := range c.Services[svc].Ports {
			if s, ok := p.(string); ok && strings.HasSuffix(s, ":"+port) {
				return true
			}
		}
		return false
	}
	for svc, port := range map[string]string{"nats": "8222", "jaeger": "16686", "grafana": "3000", "prometheus": "9090", "console": "8080"} {
		if !hasPort(svc, port) {
			t.Errorf("service %s does not publish port %s", svc, port)
		}
	}
	if !slices.ContainsFunc(c.Services["postgres"].Command.([]any), func(a any) bool { return a == "wal_level=logical" }) {
		t.Error("postgres does not run with wal_level=logical")
	}

	known := map[string]bool{}
	for _, n := range config.EnvNames() {
		known[n] = true
	}
	for name, s := range c.Services {
		if s.Image == "" && s.Build == nil {
			t.Errorf("service %s has neither image nor build", name)
		}
		if s.Build == nil && (strings.HasSuffix(s.Image, ":latest") || !strings.Contains(s.Image, ":")) {
			t.Errorf("service %s: image %q is not pinned to a version", name, s.Image)
		}
		for k := range s.Environment {
			if strings.HasPrefix(k, "SLUICE_") && !known[k] {
				t.Errorf("service %s: %s is not a sluice config override (see config.EnvNames)", name, k)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v.(string), ":")
			if strings.HasPrefix(src, "./") {
				if _, err := os.Stat(filepath.Join(repo(t), src)); err != nil {
					t.Errorf("service %s mounts %s: %v", name, src, err)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("service %s mounts volume %q that is not declared", name, src)
			}
		}
	}
}

// TestComposeServiceConfig loads deploy/sluice.compose.yaml with the
// environment compose gives the services: it must validate, and name the
// compose hosts.
func TestComposeServiceConfig(t *testing.T) {
	c := loadCompose(t, []byte(interpolate(string(read(t, "compose.yaml")))))
	for _, name := range pipelineServices {
		t.Run(name, func(t *testing.T) {
			for k, v := range c.Services[name].Environment {
				t.Setenv(k, v)
			}
			// The token file is what compose's `token` service generates
			// into the sluice-secrets volume; here it is a file of our own.
			if c.Services[name].Environment["SLUICE_HTTP_TOKEN_FILE"] != "/run/sluice/http_token" {
				t.Fatalf("SLUICE_HTTP_TOKEN_FILE = %q, want the generated /run/sluice/http_token", c.Services[name].Environment["SLUICE_HTTP_TOKEN_FILE"])
			}
			if !slices.Contains(c.Services[name].Volumes, any("sluice-secrets:/run/sluice:ro")) {
				t.Fatalf("volumes %v do not mount the generated token", c.Services[name].Volumes)
			}
			// Negative control: without the token, 0.0.0.0:8080 is refused.
			t.Setenv("SLUICE_HTTP_TOKEN_FILE", "")
			if _, err := config.Load(filepath.Join(repo(t), "deploy", "sluice.compose.yaml"), false); err == nil || !strings.Contains(err.Error(), "http.listen") {
				t.Fatalf("a tokenless 0.0.0.0 API was accepted: %v", err)
			}
			tok := filepath.Join(t.TempDir(), "http_token")
			if err := os.WriteFile(tok, []byte("0123abcd\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv("SLUICE_HTTP_TOKEN_FILE", tok)
			cfg, err := config.Load(filepath.Join(repo(t), "deploy", "sluice.compose.yaml"), false)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.HTTP.Token != "0123abcd" {
				t.Fatalf("http.token %q: want the generated token", cfg.HTTP.Token)
			}
			if cfg.NATS.URL != "nats://nats:4222" || cfg.Catalog.URL != "http://clickhouse:8123/sluice" ||
				cfg.HTTP.Listen != "0.0.0.0:8080" || cfg.Telemetry.OTLPEndpoint != "jaeger:4317" || len(cfg.Source.Tables) != 3 ||
				cfg.Telemetry.JaegerUI != "http://127.0.0.1:16686" || cfg.Telemetry.QueryURL() != "http://jaeger:16686" {
				t.Fatalf("config: %+v", cfg)
			}
			o, err := packstore.S3OptionsFromConfig(cfg.Packs)
			if err != nil {
				t.Fatal(err)
			}
			if o.Endpoint != "http://s3:7070" || o.Bucket != "sluice-packs" || o.AccessKey == "" || o.SecretKey == "" {
				t.Fatalf("S3 options: bucket %q endpoint %q", o.Bucket, o.Endpoint)
			}
		})
	}
}

// composeCLI finds a compose CLI: the docker compose plugin, a cached
// binary, or Debian's docker-compose.
func composeCLI(t *testing.T) []string {
	t.Helper()
	if p, err := exec.LookPath("docker"); err == nil {
		if exec.Command(p, "compose", "version").Run() == nil {
			return []string{p, "compose"}
		}
	}
	if p := cacheBin("docker-compose"); isExec(p) {
		return []string{p}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	t.Skip("no compose CLI: neither `docker compose`, ~/.cache/sluice/bin/docker-compose nor docker-compose (apt-get install docker-compose) is available")
	return nil
}

// TestComposeConfigCLI validates compose.yaml with the compose CLI itself
// (`config -q`), then checks the scalable services in the fully resolved
// model it prints.
func TestComposeConfigCLI(t *testing.T) {
	cli := composeCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(args ...string) []byte {
		args = append(append(cli[1:], "-f", filepath.Join(repo(t), "compose.yaml"), "--project-directory", repo(t)), args...)
		cmd := exec.CommandContext(ctx, cli[0], args...)
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		cmd.Env = append(os.Environ(), "COMPOSE_PROJECT_NAME=sluice")
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s", cli, strings.Join(args, " "), err, stderr.String())
		}
		return out.Bytes()
	}
	run("config", "-q")
	resolved := loadCompose(t, run("config"))
	checkScalable(t, resolved, strings.Join(cli, " ")+" config")
	t.Logf("validated with %s", strings.Join(cli, " "))
}
