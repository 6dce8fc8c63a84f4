package ops

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
)

// TestComposeSpec loads compose.yaml with compose-go, the loader and schema
// validator `docker compose` (v2) itself uses, so the file is checked
// against the current Compose Specification without any CLI or engine; then
// checks the resolved model: scalable services, builds and the cli profile.
func TestComposeSpec(t *testing.T) {
	for _, profiles := range [][]string{nil, {"cli"}} {
		opts, err := cli.NewProjectOptions(
			[]string{filepath.Join(repo(t), "compose.yaml")},
			cli.WithWorkingDirectory(repo(t)),
			cli.WithName("sluice"),
			cli.WithProfiles(profiles),
		)
		if err != nil {
			t.Fatal(err)
		}
		p, err := opts.LoadProject(context.Background())
		if err != nil {
			t.Fatalf("compose.yaml (profiles %v) does not load: %v", profiles, err)
		}
		for _, name := range scalable {
			s, ok := p.Services[name]
			if !ok {
				t.Fatalf("service %s missing", name)
			}
			if s.ContainerName != "" || len(s.Ports) > 0 {
				t.Errorf("service %s: container_name %q, ports %v: cannot be scaled", name, s.ContainerName, s.Ports)
			}
			if s.Build == nil || s.Build.Target != name || s.Build.Dockerfile != "deploy/Dockerfile" {
				t.Errorf("service %s: build %+v", name, s.Build)
			}
			if s.Environment["SLUICE_PACKS_SECRET_KEY"] == nil || *s.Environment["SLUICE_PACKS_SECRET_KEY"] == "" {
				t.Errorf("service %s has no S3 secret in its environment", name)
			}
		}
		_, hasCLI := p.Services["sluice"]
		if hasCLI != (len(profiles) == 1) {
			t.Errorf("profiles %v: the cli-only `sluice` service present = %t", profiles, hasCLI)
		}
	}
}

// TestComposeSpecNegativeControl shows the loader is strict: an unknown
// service key in an otherwise identical file is refused.
func TestComposeSpecNegativeControl(t *testing.T) {
	src := string(read(t, "compose.yaml"))
	bad := strings.Replace(src, "  flusher:\n", "  flusher:\n    container_nmae: flusher\n", 1)
	if bad == src {
		t.Fatal("compose.yaml has no flusher service to break")
	}
	path := filepath.Join(t.TempDir(), "compose.yaml")
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{path}, cli.WithWorkingDirectory(repo(t)), cli.WithName("sluice"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := opts.LoadProject(context.Background()); err == nil || !strings.Contains(err.Error(), "container_nmae") {
		t.Fatalf("a misspelt key was accepted: %v", err)
	}
}
