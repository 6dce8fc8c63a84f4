package ops

import (
	"context"
	"fmt"
	"hash/crc32"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/shared/pgcluster"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

// topology is a compose project running as local processes.
type topology struct {
	e      *composeEnv
	pg     *pgcluster.Cluster
	infra  []*kit.Proc
	procs  map[string][]*kit.Proc // service -> replicas
	server string                 // the console's API
	dsn    string                 // the source database, as the superuser
}

func (tp *topology) stop() {
	for _, svc := range []string{"traffic", "reader", "router", "flusher", "indexer", "publisher", "console"} {
		for _, p := range tp.procs[svc] {
			_ = p.Stop(60 * time.Second)
		}
	}
	for _, p := range tp.infra {
		_ = p.Stop(30 * time.Second)
	}
	if tp.pg != nil {
		_ = tp.pg.Kill()
	}
}

func (tp *topology) tail() string {
	var b strings.Builder
	for _, ps := range tp.procs {
		for _, p := range ps {
			fmt.Fprintf(&b, "=== %s\n%s\n", p.Name, p.Tail(1500))
		}
	}
	for _, p := range tp.infra {
		fmt.Fprintf(&b, "=== %s\n%s\n", p.Name, p.Tail(800))
	}
	return b.String()
}

// sluiceServices are the services built from deploy/Dockerfile that run
// without a profile: the pipeline and the console.
func sluiceServices(p *types.Project) []string {
	var out []string
	for _, name := range append(append([]string(nil), pipelineServices...), "console") {
		if s, ok := p.Services[name]; ok && s.Build != nil && s.Build.Dockerfile == "deploy/Dockerfile" {
			out = append(out, name)
		}
	}
	return out
}

// startInfra starts the token one-shot and the local equivalents of nats,
// postgres (with the demo schema), clickhouse and s3.
func startInfra(t *testing.T, ctx context.Context, e *composeEnv) *topology {
	t.Helper()
	tp := &topology{e: e, procs: map[string][]*kit.Proc{}}
	p := e.project
	// token: its own entrypoint and command, run to completion.
	tok := e.proc(p.Services["token"], 1, append(append([]string(nil), p.Services["token"].Entrypoint...), p.Services["token"].Command...))
	tok.Ready = ""
	if err := tok.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitExit(t, tok)

	// nats: the nats:2.12 image runs nats-server with the service's
	// command; -a binds the container's address, -sd is the /data volume
	// (the image's store_dir), as compose mounts it.
	natsBin, err := kit.NATSServerBin()
	if err != nil {
		t.Fatal(err)
	}
	ns := p.Services["nats"]
	np := e.proc(ns, 1, append([]string{"nats-server"}, ns.Command...))
	np.Bin = natsBin
	np.Args = append(np.Args, "-a", e.ip("nats"))
	// The mounted nats.conf names /data (the volume): the copy the
	// process reads has the filesystem rule applied too.
	m := e.mounts(ns)
	conf, err := os.ReadFile(m["/etc/nats/nats.conf"])
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(e.dir, "containers", "nats", "nats.conf")
	if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(local, []byte(fs(string(conf), m)), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, a := range np.Args {
		if a == m["/etc/nats/nats.conf"] {
			np.Args[i] = local
		}
	}
	np.Ready = e.ip("nats") + ":4222"
	tp.infra = append(tp.infra, np)

	// s3: versitygw of the image's tag with the service's command.
	s3 := p.Services["s3"]
	tag := s3.Image[strings.LastIndex(s3.Image, ":")+1:]
	gw := cacheBin("versitygw-" + tag)
	if !isExec(gw) {
		t.Skipf("no %s (make s3server)", gw)
	}
	sp := e.proc(s3, 1, append([]string{"versitygw"}, s3.Command...))
	sp.Bin = gw
	sp.Ready = e.net("s3:7070", "", false)
	tp.infra = append(tp.infra, sp)

	// clickhouse: `sluice catalog serve` on the ClickHouse HTTP port with
	// the server's user, password and database.
	ch := p.Services["clickhouse"]
	chEnv := func(k string) string { return *ch.Environment[k] }
	cp := e.proc(types.ServiceConfig{Name: "clickhouse"}, 1, []string{"/usr/local/bin/sluice", "catalog", "serve", "--listen", "clickhouse:8123"},
		"SLUICE_CATALOG_USER="+chEnv("CLICKHOUSE_USER"), "SLUICE_CATALOG_PASSWORD="+chEnv("CLICKHOUSE_PASSWORD"),
		"SLUICE_DATA_DIR="+filepath.Join(e.dir, "clickhouse"))
	cp.Args[len(cp.Args)-1] = e.ip("clickhouse") + ":8123"
	cp.BaseEnv = nil // a local program, not a container: it finds libchdb in this machine's cache
	cp.Ready = e.ip("clickhouse") + ":8123"
	tp.infra = append(tp.infra, cp)
	for _, ip := range tp.infra {
		if err := ip.Start(ctx); err != nil {
			tp.stop()
			t.Fatal(err)
		}
	}
	q := fmt.Sprintf("http://%s:8123/?query=%s", e.ip("clickhouse"), "CREATE+DATABASE+IF+NOT+EXISTS+"+chEnv("CLICKHOUSE_DB"))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, q, nil)
	req.SetBasicAuth(chEnv("CLICKHOUSE_USER"), chEnv("CLICKHOUSE_PASSWORD"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		tp.stop()
		t.Fatalf("creating the clickhouse database: %v %v", err, resp)
	}

	// postgres: a private cluster on the service's address and port 5432,
	// the -c settings of its command, its POSTGRES_* user and database,
	// and the init scripts it mounts.
	pgs := p.Services["postgres"]
	settings := map[string]string{}
	for k, v := range pgtest.Settings {
		settings[k] = v
	}
	for i, a := range pgs.Command {
		if a == "-c" && i+1 < len(pgs.Command) {
			k, v, _ := strings.Cut(pgs.Command[i+1], "=")
			settings[k] = v
		}
	}
	settings["listen_addresses"] = e.ip("postgres")
	// The server runs as user postgres: its directory must be traversable.
	pgRoot, err := os.MkdirTemp("", "sluice-compose-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pgRoot) })
	if err := os.Chmod(pgRoot, 0o777); err != nil {
		t.Fatal(err)
	}
	pg, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(pgRoot, "data"), Port: 5432, Settings: settings})
	if err != nil {
		tp.stop()
		t.Fatalf("a private Postgres on %s:5432: %v", e.ip("postgres"), err)
	}
	tp.pg = pg
	env := func(k string) string { return *pgs.Environment[k] }
	tp.dsn = fmt.Sprintf("postgres://postgres@%s:5432/%s?sslmode=disable", e.ip("postgres"), env("POSTGRES_DB"))
	admin := fmt.Sprintf("postgres://postgres@%s:5432/postgres?sslmode=disable", e.ip("postgres"))
	execSQL(t, ctx, admin, fmt.Sprintf("CREATE ROLE %q LOGIN SUPERUSER PASSWORD '%s'", env("POSTGRES_USER"), env("POSTGRES_PASSWORD")))
	execSQL(t, ctx, admin, fmt.Sprintf("CREATE DATABASE %q OWNER %q", env("POSTGRES_DB"), env("POSTGRES_USER")))
	for target, src := range e.mounts(pgs) {
		if strings.HasPrefix(target, "/docker-entrypoint-initdb.d/") {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			execSQL(t, ctx, fmt.Sprintf("postgres://%s:%s@%s:5432/%s?sslmode=disable", env("POSTGRES_USER"), env("POSTGRES_PASSWORD"), e.ip("postgres"), env("POSTGRES_DB")), string(b))
		}
	}
	return tp
}

// startTraffic starts the traffic service (its psql loop) with env added
// to its environment.
func (tp *topology) startTraffic(t *testing.T, ctx context.Context, env ...string) *kit.Proc {
	t.Helper()
	ts := tp.e.project.Services["traffic"]
	tr := tp.e.proc(ts, 1, append(append([]string(nil), ts.Entrypoint...), ts.Command...), env...)
	tr.Ready = ""
	if err := tr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	tp.procs["traffic"] = []*kit.Proc{tr}
	return tr
}

// useConsole points the test's CLI calls at the console's API, with the
// token the one-shot generated.
func (tp *topology) useConsole(t *testing.T) {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(tp.e.dir, "volumes", "sluice-secrets", "http_token"))
	if err != nil {
		t.Fatalf("the token one-shot wrote no token: %v", err)
	}
	t.Setenv("SLUICE_HTTP_TOKEN", strings.TrimSpace(string(tok)))
	tp.server = "http://" + tp.e.ip("console") + ":8080"
}

func execSQL(t *testing.T, ctx context.Context, dsn, sql string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%.80s: %v", sql, err)
	}
}

// sampled is the oracle's sample of the demo's tenants: one in eight by a
// hash of the name (the whole check reads ~600 destinations, ~2 minutes
// on a loaded machine).
func sampled(tenant string) bool { return crc32.ChecksumIEEE([]byte(tenant))%8 == 0 }

func waitExit(t *testing.T, p *kit.Proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for p.Running() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not finish: %s", p.Name, p.Tail(2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sluiceProc is replica i of a sluice service of project p.
func sluiceProc(e *composeEnv, p *types.Project, name string, i int, timeout time.Duration) *kit.Proc {
	s := p.Services[name]
	container := e.container(name, i)
	pr := e.proc(s, i, e.imageCommand(s), "SLUICE_DATA_DIR="+filepath.Join(e.dir, "containers", container, "var", "lib", "sluice"))
	pr.Ready = "http://" + e.ip(container) + ":8080/healthz"
	pr.StartTimeout = timeout
	return pr
}

// TestComposeTopology starts compose.yaml's sluice services (reader,
// router, flusher, indexer, publisher and console) as local processes,
// each with the command deploy/Dockerfile and compose give it, exactly its
// environment, and the replica count of the file's `--scale` line, over
// local equivalents of its infrastructure on the addresses and ports the
// file names (composeproc_test.go says how a container's network and
// filesystem are emulated), with its token one-shot and traffic loop;
// then the oracle over the demo tables (a sample of one tenant in eight).
// Negative controls: copies of
// compose.yaml with a misspelt variable name, a wrong port and a wrong
// host in a URL each keep a service from coming up.
func TestComposeTopology(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	repoDir := repo(t)
	src := string(read(t, "compose.yaml"))
	p := loadProject(t, repoDir, filepath.Join(repoDir, "compose.yaml"))
	scale := scaleFrom(src)
	e := newComposeEnv(t, repoDir, p, buildImages(t, repoDir))
	tp := startInfra(t, ctx, e)
	defer tp.stop()
	for _, name := range sluiceServices(p) {
		svc := p.Services[name]
		n := max(scale[name], svc.GetScale())
		for i := 1; i <= n; i++ {
			tp.procs[name] = append(tp.procs[name], sluiceProc(e, p, name, i, 3*time.Minute))
		}
	}
	var counts []string
	for _, name := range sluiceServices(p) {
		for _, pr := range tp.procs[name] {
			if err := pr.Start(ctx); err != nil {
				t.Fatalf("%v\n%s", err, tp.tail())
			}
		}
		counts = append(counts, fmt.Sprintf("%s×%d", name, len(tp.procs[name])))
	}
	t.Logf("compose services as processes: %s on %s0/24", strings.Join(counts, " "), e.prefix)
	// traffic: the psql loop of the service, stopped after a while.
	tr := tp.startTraffic(t, ctx)
	tp.useConsole(t)
	time.Sleep(8 * time.Second) // how long the traffic runs, not a synchronization
	_ = tr.Signal(syscall.SIGTERM)
	waitExit(t, tr)
	var lsn string
	conn, err := pgx.Connect(ctx, tp.dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if _, err := kit.Wait(ctx, tp.server, lsn, 3*time.Minute); err != nil {
		t.Fatalf("waiting for %s at the console: %v\n%s", lsn, err, tp.tail())
	}
	rep, err := kit.Check(ctx, tp.dsn, tp.server, kit.CheckOptions{Tables: []kit.Table{
		{Name: "public.customers", Keys: []string{"tenant_id", "id"}, Routing: "tenant_id"},
		{Name: "public.orders", Keys: []string{"tenant_id", "id"}, Routing: "tenant_id"},
		{Name: "public.events", Keys: []string{"id"}, Routing: "tenant_id"},
	}, Only: sampled})
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, tp.tail())
	}
	t.Log(rep)
	if !rep.OK() || rep.Rows == 0 {
		t.Errorf("the compose topology's destinations differ from the source: %s\n%s", rep, strings.Join(rep.Diffs, "\n"))
	}

	// Negative controls: one service of a mutated copy against the same
	// infrastructure must not come up.
	for _, m := range []struct{ name, from, to, service string }{
		{"misspelt variable", "SLUICE_SOURCE_DSN:", "SLUICE_SOURCE_DNS:", "reader"},
		{"wrong port", "SLUICE_NATS_URL: nats://nats:4222", "SLUICE_NATS_URL: nats://nats:4223", "router"},
		{"wrong host in a URL", "SLUICE_CATALOG_URL: http://clickhouse:8123/", "SLUICE_CATALOG_URL: http://clickhous:8123/", "publisher"},
	} {
		bad := strings.Replace(src, m.from, m.to, 1)
		if bad == src {
			t.Fatalf("%s: compose.yaml has no %q", m.name, m.from)
		}
		path := filepath.Join(t.TempDir(), "compose.yaml")
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		mp := loadProject(t, repoDir, path)
		pr := sluiceProc(e, mp, m.service, 9, 12*time.Second)
		err := pr.Start(ctx)
		_ = pr.Stop(10 * time.Second)
		if err == nil {
			t.Errorf("negative control %s (%s -> %s): %s came up", m.name, m.from, m.to, m.service)
			continue
		}
		first, _, _ := strings.Cut(err.Error(), "\n")
		t.Logf("negative control %s: %s does not come up: %.200s", m.name, m.service, first)
	}
}
