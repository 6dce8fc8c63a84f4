package ops

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	stageRe = regexp.MustCompile(`(?m)^FROM\s+\S+\s+AS\s+(\S+)\s*$`)
	buildRe = regexp.MustCompile(`\./services/(\$s|[a-z]+)(/cmd/(\$s|[a-z]+))?`)
	loopRe  = regexp.MustCompile(`for s in ([a-z ]+); do`)
)

// dockerTargets returns the Dockerfile's stage names and the Go packages
// its build stage compiles.
func dockerTargets(dockerfile string) (stages, pkgs []string) {
	for _, m := range stageRe.FindAllStringSubmatch(dockerfile, -1) {
		stages = append(stages, m[1])
	}
	var loop []string
	if m := loopRe.FindStringSubmatch(dockerfile); m != nil {
		loop = strings.Fields(m[1])
	}
	for _, m := range buildRe.FindAllString(dockerfile, -1) {
		if strings.Contains(m, "$s") {
			for _, s := range loop {
				pkgs = append(pkgs, strings.ReplaceAll(m, "$s", s))
			}
			continue
		}
		pkgs = append(pkgs, m)
	}
	slices.Sort(pkgs)
	return stages, slices.Compact(pkgs)
}

// TestDockerfileTargets checks that deploy/Dockerfile has one stage per
// service (plus sluice) and compiles each service's ./services/<name>/cmd/<name>.
func TestDockerfileTargets(t *testing.T) {
	stages, pkgs := dockerTargets(string(read(t, "deploy", "Dockerfile")))
	for _, name := range append(slices.Clone(pipelineServices), "sluice") {
		if !slices.Contains(stages, name) {
			t.Errorf("deploy/Dockerfile has no %q stage (stages: %v)", name, stages)
		}
	}
	want := []string{"./services/sluice"}
	for _, name := range pipelineServices {
		want = append(want, "./services/"+name+"/cmd/"+name)
	}
	slices.Sort(want)
	if !slices.Equal(pkgs, want) {
		t.Errorf("deploy/Dockerfile builds %v, want %v", pkgs, want)
	}
	// Every service directory with a cmd/ must be in the image set.
	ents, err := os.ReadDir(filepath.Join(repo(t), "services"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(repo(t), "services", e.Name(), "cmd", e.Name())); err == nil && !slices.Contains(pipelineServices, e.Name()) {
			t.Errorf("services/%s/cmd/%s exists but has no image in deploy/Dockerfile", e.Name(), e.Name())
		}
	}
}

// TestDockerfileBinariesBuild builds every binary the Dockerfile builds from
// the workspace: what "every image's binary builds in CI" means without a
// Docker engine. It uses the default build flags (not the image's
// CGO_ENABLED=0 -trimpath) so it shares the build cache with `go test` and
// `make build` instead of recompiling every dependency (measured: 347s cold
// with the image's flags on this 2-core machine); no package here uses cgo.
func TestDockerfileBinariesBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds six binaries")
	}
	_, pkgs := dockerTargets(string(read(t, "deploy", "Dockerfile")))
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(repo(t), p)); err != nil {
			t.Errorf("%s does not exist: the image cannot be built", p)
		}
	}
	if t.Failed() {
		return
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", out + string(os.PathSeparator)}, pkgs...)...)
	cmd.Dir = repo(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", pkgs, err, b)
	}
	for _, p := range pkgs {
		if !isExec(filepath.Join(out, filepath.Base(p))) {
			t.Errorf("no binary for %s", p)
		}
	}
	t.Logf("built %d binaries in %s", len(pkgs), time.Since(start).Round(time.Millisecond))
}
