package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-cdc/sluice/test/kit"
)

// liveInterval replaces the shipped 5s scrape and evaluation intervals in
// the live test: the only change to prometheus.yml besides its targets.
const liveInterval = "2s"

// prometheusBin is Debian's Prometheus server (.ci/run installs the
// package): without it the live test skips, except in CI, where it fails.
func prometheusBin(t *testing.T) string {
	t.Helper()
	p, ok := tool("prometheus")
	if !ok {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set and no prometheus binary is installed (apt-get install prometheus; .ci/run does)")
		}
		t.Skip("prometheus not found (apt-get install prometheus): the live monitoring test needs the server")
	}
	return p
}

// promConfig is the compose project's prometheus.yml as the prometheus
// container would run it here: the filesystem and network rules of
// composeEnv applied to every path and target, each compose DNS name
// (dns_sd_configs, type A) replaced by the static list of what it would
// resolve to (every replica of the service, with the __meta_dns_name label
// DNS discovery gives each target, so the shipped relabelling runs
// unchanged), localhost being the container itself, and the intervals
// shortened to liveInterval. rules, when not empty, replaces rule_files.
func promConfig(t *testing.T, e *composeEnv, self string, replicas map[string]int, rules []string) []byte {
	t.Helper()
	ps := e.project.Services["prometheus"]
	m := e.mounts(ps)
	var cfg map[string]any
	if err := yaml.Unmarshal(read(t, "deploy", "prometheus", "prometheus.yml"), &cfg); err != nil {
		t.Fatal(err)
	}
	global := cfg["global"].(map[string]any)
	global["scrape_interval"], global["evaluation_interval"] = liveInterval, liveInterval
	if rules != nil {
		cfg["rule_files"] = rules
	} else {
		var rf []string
		for _, r := range cfg["rule_files"].([]any) {
			rf = append(rf, fs(r.(string), m))
		}
		cfg["rule_files"] = rf
	}
	for _, sc := range cfg["scrape_configs"].([]any) {
		sc := sc.(map[string]any)
		if a, ok := sc["authorization"].(map[string]any); ok {
			if f, ok := a["credentials_file"].(string); ok {
				a["credentials_file"] = fs(f, m)
			}
		}
		var static []any
		if dns, ok := sc["dns_sd_configs"].([]any); ok {
			for _, d := range dns {
				d := d.(map[string]any)
				if d["type"] != "A" {
					t.Fatalf("job %v: dns_sd_configs of type %v: the live test resolves type A only", sc["job_name"], d["type"])
				}
				for _, name := range d["names"].([]any) {
					var targets []string
					for i := 1; i <= max(1, replicas[name.(string)]); i++ {
						targets = append(targets, fmt.Sprintf("%s:%v", e.ip(e.container(name.(string), i)), d["port"]))
					}
					static = append(static, map[string]any{"targets": targets, "labels": map[string]any{"__meta_dns_name": name}})
				}
			}
			delete(sc, "dns_sd_configs")
		}
		if sts, ok := sc["static_configs"].([]any); ok {
			for _, st := range sts {
				st := st.(map[string]any)
				var targets []string
				for _, tg := range st["targets"].([]any) {
					tg := strings.Replace(tg.(string), "localhost:", self+":", 1)
					targets = append(targets, e.net(tg, self, false))
				}
				st["targets"] = targets
				static = append(static, st)
			}
		}
		sc["static_configs"] = static
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// promServer is one Prometheus process of the live test.
type promServer struct {
	p    *kit.Proc
	base string
}

// startPrometheus runs replica i of the compose prometheus service: the
// image's program (/bin/prometheus, here Debian's) with the service's
// command under the emulation's rules, on the container's address; the
// image's storage path (/prometheus, the prom-data volume) unless storage
// is given; rules as in promConfig.
func startPrometheus(t *testing.T, ctx context.Context, e *composeEnv, bin string, i int, replicas map[string]int, rules []string, storage string) *promServer {
	t.Helper()
	ps := e.project.Services["prometheus"]
	self := e.ip(e.container("prometheus", i))
	cfgPath := filepath.Join(e.dir, "containers", e.container("prometheus", i), "prometheus.yml")
	if err := os.MkdirAll(filepath.Dir(cfgPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, promConfig(t, e, self, replicas, rules), 0o644); err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"/bin/prometheus"}, ps.Command...)
	// The image's CMD names its storage path and its listen address is the
	// default; the compose command replaces that CMD, so they are given
	// here as the image has them, and the rules map them.
	if storage == "" {
		storage = "/prometheus"
	}
	argv = append(argv, "--storage.tsdb.path="+storage, "--web.listen-address=0.0.0.0:9090")
	pr := e.proc(ps, i, argv)
	pr.Bin = bin
	for j, a := range pr.Args {
		if strings.HasPrefix(a, "--config.file=") {
			pr.Args[j] = "--config.file=" + cfgPath
		}
	}
	pr.Ready = "http://" + self + ":9090/-/ready"
	pr.StartTimeout = time.Minute
	if err := pr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pr.Stop(20 * time.Second) })
	return &promServer{p: pr, base: "http://" + self + ":9090"}
}

// api GETs one Prometheus HTTP API path and decodes its data.
func (ps *promServer) api(ctx context.Context, path string, q url.Values, data any) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	u := ps.base + path
	if q != nil {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return fmt.Errorf("GET %s: %s: %w", path, resp.Status, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
	Value  string            `json:"value"`
}

func (a promAlert) String() string {
	var ls []string
	for k, v := range a.Labels {
		if k != "alertname" && k != "severity" {
			ls = append(ls, k+"="+v)
		}
	}
	sort.Strings(ls)
	return fmt.Sprintf("%s{%s} %s (value %s)", a.Labels["alertname"], strings.Join(ls, ","), a.State, a.Value)
}

func (ps *promServer) alerts(ctx context.Context) ([]promAlert, error) {
	var d struct {
		Alerts []promAlert `json:"alerts"`
	}
	err := ps.api(ctx, "/api/v1/alerts", nil, &d)
	return d.Alerts, err
}

type promRule struct {
	Name           string    `json:"name"`
	Type           string    `json:"type"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	State          string    `json:"state"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

func (ps *promServer) rules(ctx context.Context) ([]promRule, error) {
	var d struct {
		Groups []struct {
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	err := ps.api(ctx, "/api/v1/rules", nil, &d)
	var out []promRule
	for _, g := range d.Groups {
		out = append(out, g.Rules...)
	}
	return out, err
}

type promTarget struct {
	Labels    map[string]string `json:"labels"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
	ScrapeURL string            `json:"scrapeUrl"`
}

func (ps *promServer) targets(ctx context.Context) ([]promTarget, error) {
	var d struct {
		Active []promTarget `json:"activeTargets"`
	}
	err := ps.api(ctx, "/api/v1/targets", nil, &d)
	return d.Active, err
}

// names are the metric names Prometheus holds: every scraped series'
// (histograms' _bucket, _sum and _count as they are exposed) and every
// recording rule's.
func (ps *promServer) names(ctx context.Context) (map[string]bool, error) {
	var d []string
	if err := ps.api(ctx, "/api/v1/label/__name__/values", nil, &d); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, n := range d {
		out[n] = true
	}
	return out, nil
}

// queryError evaluates expr now and returns Prometheus's error, if any.
func (ps *promServer) queryError(ctx context.Context, expr string) error {
	var d json.RawMessage
	return ps.api(ctx, "/api/v1/query", url.Values{"query": {expr}}, &d)
}

// exporterMetric: jetstream_* are prometheus-nats-exporter's, which the
// live test does not run (its module is not on the module proxy this
// project's machines reach, and no Debian package ships it).
func exporterMetric(m string) bool { return strings.HasPrefix(m, "jetstream_") }

// missingMetrics returns, for each expression, the metric names it uses
// (test/ops's metricRe) that Prometheus does not hold, and the
// expressions Prometheus refuses. A name is looked up as written:
// histograms are exposed as _bucket, _sum and _count series.
func missingMetrics(ctx context.Context, ps *promServer, have map[string]bool, exprs map[string]string) (missing []string, skipped map[string]bool) {
	skipped = map[string]bool{}
	var keys []string
	for k := range exprs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, where := range keys {
		expr := exprs[where]
		for _, m := range metricRe.FindAllString(expr, -1) {
			switch {
			case exporterMetric(m):
				skipped[m] = true
			case !have[m]:
				missing = append(missing, fmt.Sprintf("%s: %s is in no live scrape (expr %q)", where, m, expr))
			}
		}
		if err := ps.queryError(ctx, expr); err != nil {
			missing = append(missing, fmt.Sprintf("%s: Prometheus refuses %q: %v", where, expr, err))
		}
	}
	return missing, skipped
}

// checkMetrics reports what missingMetrics finds in exprs.
func checkMetrics(t *testing.T, ctx context.Context, ps *promServer, have map[string]bool, what string, exprs map[string]string) {
	t.Helper()
	missing, skipped := missingMetrics(ctx, ps, have, exprs)
	if len(missing) > 0 {
		t.Errorf("metrics and queries of the shipped %s that the live pipeline does not answer:\n%s", what, strings.Join(missing, "\n"))
	}
	var sk []string
	for m := range skipped {
		sk = append(sk, m)
	}
	sort.Strings(sk)
	t.Logf("%s: %d expressions checked against %d live metric names; not checked (prometheus-nats-exporter's, not run here): %s",
		what, len(exprs), len(have), strings.Join(sk, ", "))
}

// dashboardExprs are the queries of every dashboard panel, keyed by panel
// title and query index.
func dashboardExprs(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, p := range loadDashboard(t).Panels {
		for i, q := range p.Targets {
			if q.Expr != "" {
				out[fmt.Sprintf("dashboard panel %q query %d", p.Title, i)] = q.Expr
			}
		}
	}
	return out
}

// alertRuleExprs are the expressions of alerts.yml keyed by alert name.
func alertRuleExprs(t *testing.T) map[string]string {
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(read(t, "deploy", "prometheus", "alerts.yml"), &f); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out["alert rule "+r.Alert+r.Record] = r.Expr
		}
	}
	return out
}

// active filters alerts by state (firing or pending).
func active(as []promAlert) []string {
	var out []string
	for _, a := range as {
		if a.State == "firing" || a.State == "pending" {
			out = append(out, a.String())
		}
	}
	sort.Strings(out)
	return out
}

func firing(as []promAlert, name string, labels map[string]string) bool {
	for _, a := range as {
		if a.State != "firing" || a.Labels["alertname"] != name {
			continue
		}
		ok := true
		for k, v := range labels {
			ok = ok && a.Labels[k] == v
		}
		if ok {
			return true
		}
	}
	return false
}

// TestLiveMonitoring is the shipped monitoring against a running
// pipeline (issue 37): compose.yaml's sluice services as local processes
// (one replica each, over the same emulation as TestComposeTopology: the
// real nats-server, a private Postgres with the demo schema and the
// traffic loop, the catalog host, versitygw) and the compose prometheus
// service run by Debian's Prometheus with the shipped prometheus.yml,
// whose only changes are its targets (compose DNS becomes the replicas'
// addresses, see promConfig) and a 2s scrape and evaluation interval, and
// the shipped alerts.yml unchanged.
//
//   - Healthy, with traffic flowing: every sluice target is up, every rule
//     evaluates without error, and no alert is firing or pending.
//   - Every metric a dashboard panel names is in the healthy pipeline's
//     live scrape (or is a recording rule's), every metric an alert rule
//     names is by the end of the faults below, and Prometheus evaluates
//     every query; jetstream_* (prometheus-nats-exporter's) are listed as
//     not checked. Negative control: a panel query naming a metric no
//     service exports is reported.
//   - Faults with real causes: a column type change on public.customers
//     halts the table (as in test/e2e TestTypeChangeHaltsThenResyncRecovers)
//     and the console (a standby publisher) is killed: with the shipped
//     `for:` (1m and 2m, waited out) SluiceSourceTableHalted fires for the
//     table and SluiceServiceDown for the console, and nothing else fires.
//     Negative control: a second Prometheus over the same targets with a
//     copy of alerts.yml whose halt expression names a misspelt metric
//     never fires it.
func TestLiveMonitoring(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	promBin := prometheusBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	repoDir := repo(t)
	p := loadProject(t, repoDir, filepath.Join(repoDir, "compose.yaml"))
	e := newComposeEnv(t, repoDir, p, buildImages(t, repoDir))
	tp := startInfra(t, ctx, e)
	defer tp.stop()
	replicas := map[string]int{}
	for _, name := range sluiceServices(p) {
		pr := sluiceProc(e, p, name, 1, 3*time.Minute)
		tp.procs[name] = []*kit.Proc{pr}
		replicas[name] = 1
		if err := pr.Start(ctx); err != nil {
			t.Fatalf("%v\n%s", err, tp.tail())
		}
	}
	// The traffic loop runs for the whole test, slower than compose's 20
	// transactions per second (one psql process each) on a shared machine.
	tr := tp.startTraffic(t, ctx, "RATE=5")
	tp.useConsole(t)

	prom := startPrometheus(t, ctx, e, promBin, 1, replicas, nil, "")
	// The negative control's Prometheus: the same targets, a copy of
	// alerts.yml with the halt alert's metric misspelt.
	alerts := string(read(t, "deploy", "prometheus", "alerts.yml"))
	broken := strings.ReplaceAll(alerts, "sluice_reader_table_halted", "sluice_reader_tables_halted")
	if broken == alerts {
		// Reported; the fault phase below still checks the shipped rules.
		t.Errorf("negative control: alerts.yml names no sluice_reader_table_halted to misspell")
	}
	brokenRules := filepath.Join(t.TempDir(), "alerts.yml")
	if err := os.WriteFile(brokenRules, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	control := startPrometheus(t, ctx, e, promBin, 2, replicas, []string{brokenRules}, filepath.Join(t.TempDir(), "tsdb"))

	lsn := func() string {
		conn, err := pgx.Connect(ctx, tp.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var l string
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	// Healthy: the backfill and the traffic so far are published.
	if _, err := kit.Wait(ctx, tp.server, lsn(), 4*time.Minute); err != nil {
		t.Fatalf("waiting for the backfill at the console: %v\n%s", err, tp.tail())
	}
	caughtUp := time.Now()
	// Every sluice target up, every rule evaluated (without error) at
	// least three times since.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var problems []string
		targets, err := prom.targets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		up := map[string]bool{}
		for _, tg := range targets {
			if tg.Labels["job"] == "sluice" {
				if tg.Health == "up" {
					up[tg.Labels["service"]] = true
				} else {
					problems = append(problems, fmt.Sprintf("target %s (%s) %s: %s", tg.ScrapeURL, tg.Labels["service"], tg.Health, tg.LastError))
				}
			}
		}
		for _, s := range sluiceServices(p) {
			if !up[s] {
				problems = append(problems, "no sluice target up with service="+s)
			}
		}
		rules, err := prom.rules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			if r.Health == "err" {
				t.Fatalf("rule %s does not evaluate: %s", r.Name, r.LastError)
			}
			if r.LastEvaluation.Before(caughtUp.Add(3 * 2 * time.Second)) {
				problems = append(problems, fmt.Sprintf("rule %s last evaluated at %s", r.Name, r.LastEvaluation.Format(time.RFC3339)))
			}
		}
		if len(rules) != len(alertRuleExprs(t)) {
			problems = append(problems, fmt.Sprintf("Prometheus loaded %d rules, alerts.yml has %d", len(rules), len(alertRuleExprs(t))))
		}
		if len(problems) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus is not scraping and evaluating the pipeline:\n%s\n%s", strings.Join(problems, "\n"), tp.tail())
		}
		time.Sleep(time.Second)
	}
	as, err := prom.alerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := active(as); len(a) > 0 {
		t.Errorf("alerts of a healthy pipeline (traffic flowing, caught up %s ago):\n%s", time.Since(caughtUp).Round(time.Second), strings.Join(a, "\n"))
	}

	// Every metric a dashboard panel names, in the healthy pipeline's
	// scrape (the alerts' are checked after the faults: a halt's series
	// exists only once a table is halted).
	have, err := prom.names(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exprs := dashboardExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("the dashboard has %d queries", len(exprs))
	}
	checkMetrics(t, ctx, prom, have, "dashboard", exprs)
	// Negative control: a panel query naming a metric nobody exports.
	bad := map[string]string{`dashboard panel "control"`: `sum(rate(sluice_flusher_no_such_rows_total[1m]))`}
	if m, _ := missingMetrics(ctx, prom, have, bad); len(m) != 1 || !strings.Contains(m[0], "sluice_flusher_no_such_rows_total") {
		t.Errorf("negative control: a dashboard query of a metric no service exports is not reported: %v", m)
	}

	// Faults: a halted table (a column's type changes; its next change
	// halts it) and a killed replica.
	execSQL(t, ctx, tp.dsn, `ALTER TABLE public.customers ALTER COLUMN created_at TYPE text USING created_at::text;
		UPDATE public.customers SET name = name || '!' WHERE id = 1`)
	tp.procs["console"][0].Kill()
	faulted := time.Now()
	want := []struct {
		alert  string
		labels map[string]string
	}{
		{"SluiceSourceTableHalted", map[string]string{"table": "public.customers"}},
		{"SluiceServiceDown", map[string]string{"service": "console"}},
	}
	var wantNames []string
	for _, w := range want {
		wantNames = append(wantNames, w.alert)
	}
	deadline = time.Now().Add(5 * time.Minute)
	for {
		as, err := prom.alerts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var waiting []string
		for _, w := range want {
			if !firing(as, w.alert, w.labels) {
				waiting = append(waiting, fmt.Sprintf("%s%v", w.alert, w.labels))
			}
		}
		if len(waiting) == 0 {
			t.Logf("after the faults (%s): %s", time.Since(faulted).Round(time.Second), strings.Join(active(as), "; "))
			var others []string
			for _, a := range as {
				if a.State == "firing" && !slices.Contains(wantNames, a.Labels["alertname"]) {
					others = append(others, a.String())
				}
			}
			if len(others) > 0 {
				t.Errorf("alerts firing beside the two faults' own:\n%s", strings.Join(others, "\n"))
			}
			break
		}
		if time.Now().After(deadline) {
			st, _ := kit.CLI(ctx, "http://"+e.ip("publisher")+":8080", "status")
			t.Fatalf("%s after the faults, not firing: %s\nactive: %s\nstatus:\n%s\n%s", time.Since(faulted).Round(time.Second),
				strings.Join(waiting, ", "), strings.Join(active(as), "; "), st, tp.tail())
		}
		time.Sleep(2 * time.Second)
	}
	if have, err = prom.names(ctx); err != nil {
		t.Fatal(err)
	}
	checkMetrics(t, ctx, prom, have, "alert rules", alertRuleExprs(t))
	cas, err := control.alerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if firing(cas, "SluiceSourceTableHalted", nil) {
		t.Errorf("negative control: SluiceSourceTableHalted fires with a misspelt metric: %v", active(cas))
	}
	if !firing(cas, "SluiceServiceDown", map[string]string{"service": "console"}) {
		t.Errorf("the negative control's Prometheus does not fire SluiceServiceDown either (so it proves nothing): %v", active(cas))
	}
	_ = tr.Signal(syscall.SIGTERM)
}
