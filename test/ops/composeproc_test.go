package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/sluice-cdc/sluice/test/kit"
)

// A compose project brought up as local processes. No container engine
// runs here, so the two things a container gives a process are emulated,
// each by one rule applied to every argument and environment value of
// every process (and nothing else changes):
//   - its network: every service (every replica) gets its own loopback
//     address (127.a.b.N, a and b random per test); a compose host name
//     followed by a port, or a whole environment value that is a host
//     name, becomes
//     that address, and 0.0.0.0:port or :port (listen on every interface
//     of the container) becomes the process's own address. Ports are
//     never changed.
//   - its filesystem: a bind mount's target path becomes the file in the
//     repository, a named volume's target its directory under the test's
//     temp dir (shared by every service mounting it, as in compose); a
//     sluice process's data_dir (/var/lib/sluice in the image) is its own
//     directory, passed as SLUICE_DATA_DIR (the one variable added).
//
// The images' programs are the same programs built or cached here:
// /usr/local/bin/<service> of deploy/Dockerfile are built from the
// repository; nats, postgres, clickhouse and s3 are replaced by local
// equivalents on the addresses and ports the file names (see infra in
// topology_test.go).
type composeEnv struct {
	t       *testing.T
	repo    string
	dir     string
	project *types.Project
	prefix  string            // 127.a.b.
	ips     map[string]string // container (service or service-N) -> address
	bins    map[string]string // image program path -> local binary
	dockerf string
	mu      sync.Mutex
	next    int
}

// loadProject loads a compose file with compose-go as `docker compose`
// does (empty environment: every ${VAR:-default} takes its default).
func loadProject(t *testing.T, repoDir, file string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{file}, cli.WithWorkingDirectory(repoDir), cli.WithName("sluice"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("loading %s: %v", file, err)
	}
	return p
}

// scaleFrom reads the replica counts of the `docker compose up --scale`
// line of the file's header.
func scaleFrom(src string) map[string]int {
	out := map[string]int{}
	for _, m := range regexp.MustCompile(`--scale (\w+)=(\d+)`).FindAllStringSubmatch(src, -1) {
		n, _ := strconv.Atoi(m[2])
		out[m[1]] = n
	}
	return out
}

func newComposeEnv(t *testing.T, repoDir string, p *types.Project, bins map[string]string) *composeEnv {
	e := &composeEnv{t: t, repo: repoDir, dir: t.TempDir(), project: p, ips: map[string]string{}, bins: bins,
		prefix: fmt.Sprintf("127.%d.%d.", 10+rand.IntN(200), 1+rand.IntN(250)), next: 1}
	e.dockerf = string(read(t, "deploy", "Dockerfile"))
	var names []string
	for name := range p.Services {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		e.ip(name)
	}
	return e
}

// ip is the address of a container (a service name is its first replica).
func (e *composeEnv) ip(container string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ip, ok := e.ips[container]; ok {
		return ip
	}
	ip := e.prefix + strconv.Itoa(e.next)
	e.next++
	e.ips[container] = ip
	return ip
}

// container is the name of replica i (1-based) of a service; replica 1 of
// a service answers to the service's name.
func (e *composeEnv) container(service string, i int) string {
	if i == 1 {
		return service
	}
	return fmt.Sprintf("%s-%d", service, i)
}

var hostPortRe = regexp.MustCompile(`(^|//|@)([a-z][a-z0-9_-]*)(:\d)`)

// net applies the network rule to one value for a process at self (a
// whole value that is a host name only in the environment, e.g. PGHOST).
func (e *composeEnv) net(v, self string, envValue bool) string {
	v = strings.ReplaceAll(v, "0.0.0.0:", self+":")
	if regexp.MustCompile(`^:\d+$`).MatchString(v) {
		v = self + v
	}
	if _, ok := e.project.Services[v]; ok && envValue {
		return e.ip(v)
	}
	return hostPortRe.ReplaceAllStringFunc(v, func(m string) string {
		sm := hostPortRe.FindStringSubmatch(m)
		if _, ok := e.project.Services[sm[2]]; !ok {
			return m
		}
		return sm[1] + e.ip(sm[2]) + sm[3]
	})
}

// mounts maps a service's volume targets to local paths.
func (e *composeEnv) mounts(s types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for _, v := range s.Volumes {
		switch v.Type {
		case types.VolumeTypeBind:
			out[v.Target] = v.Source
		case types.VolumeTypeVolume:
			d := filepath.Join(e.dir, "volumes", v.Source)
			if err := os.MkdirAll(d, 0o755); err != nil {
				e.t.Fatal(err)
			}
			out[v.Target] = d
		}
	}
	return out
}

// fs applies the filesystem rule to one value.
func fs(v string, mounts map[string]string) string {
	var targets []string
	for t := range mounts {
		targets = append(targets, t)
	}
	sort.Slice(targets, func(i, j int) bool { return len(targets[i]) > len(targets[j]) })
	for _, t := range targets {
		re := regexp.MustCompile(`(^|[\s=;:"'])` + regexp.QuoteMeta(t) + `(/|$|[\s;"'])`)
		v = re.ReplaceAllString(v, "${1}"+strings.ReplaceAll(mounts[t], "$", "$$")+"${2}")
	}
	return v
}

// imageCommand is what a container of a service built from
// deploy/Dockerfile runs: the target's ENTRYPOINT, then the service's
// command or else the target's CMD.
func (e *composeEnv) imageCommand(s types.ServiceConfig) []string {
	stage := regexp.MustCompile(`(?ms)^FROM \S+ AS ` + regexp.QuoteMeta(s.Build.Target) + `$(.*?)(^FROM |\z)`).FindStringSubmatch(e.dockerf)
	if stage == nil {
		e.t.Fatalf("deploy/Dockerfile has no stage %s", s.Build.Target)
	}
	instr := func(name string) []string {
		m := regexp.MustCompile(`(?m)^` + name + ` (\[.*\])$`).FindStringSubmatch(stage[1])
		if m == nil {
			return nil
		}
		var out []string
		if err := json.Unmarshal([]byte(m[1]), &out); err != nil {
			e.t.Fatalf("deploy/Dockerfile %s %s: %v", s.Build.Target, name, err)
		}
		return out
	}
	entry := instr("ENTRYPOINT")
	if len(s.Entrypoint) > 0 {
		entry = s.Entrypoint
	}
	cmd := instr("CMD")
	if s.Command != nil {
		cmd = s.Command
	}
	return append(append([]string(nil), entry...), cmd...)
}

// proc is replica i of service s as a local process running argv (the
// program is mapped through bins), with the service's environment.
func (e *composeEnv) proc(s types.ServiceConfig, i int, argv []string, extraEnv ...string) *kit.Proc {
	name := e.container(s.Name, i)
	self := e.ip(name)
	m := e.mounts(s)
	var args []string
	for _, a := range argv {
		args = append(args, e.net(fs(a, m), self, false))
	}
	bin := args[0]
	if b, ok := e.bins[argv[0]]; ok {
		bin = b
	}
	var env []string
	for k, v := range s.Environment {
		val := ""
		if v != nil {
			val = *v
		}
		env = append(env, k+"="+e.net(fs(val, m), self, true))
	}
	sort.Strings(env)
	env = append(env, extraEnv...)
	return &kit.Proc{Name: name, Bin: bin, Args: args[1:], Env: env, Dir: e.dir,
		BaseEnv: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Join(e.dir, "home-"+name)}}
}

// buildImages builds the programs deploy/Dockerfile puts in the images
// (the same packages, with this machine's toolchain and settings).
func buildImages(t *testing.T, repoDir string) map[string]string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bin")
	if d := os.Getenv("SLUICE_COMPOSE_BINS"); d != "" {
		dir = d // binaries built before (go build -o $dir/ ./services/...): saves the build
	}
	out := map[string]string{}
	pkgs := map[string]string{"sluice": "./services/sluice"}
	for _, s := range pipelineServices {
		pkgs[s] = "./services/" + s + "/cmd/" + s
	}
	args := []string{"build", "-o", dir + "/"}
	for name, pkg := range pkgs {
		args = append(args, pkg)
		out["/usr/local/bin/"+name] = filepath.Join(dir, name)
	}
	if os.Getenv("SLUICE_COMPOSE_BINS") != "" {
		return out
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = repoDir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %v: %v\n%s", pkgs, err, b)
	}
	return out
}
