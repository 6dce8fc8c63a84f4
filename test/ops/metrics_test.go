package ops

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// proposedMetrics are used by the alerts or the dashboard but not (yet)
// registered by any service: the services that should own them are named.
// The test reports them; one that appears in the code must leave this list.
var proposedMetrics = map[string]string{}

var metricRe = regexp.MustCompile(`\b(sluice_[a-z0-9_]+|jetstream_[a-z0-9_]+|up)\b`)

// baseMetric strips the series suffixes of histograms and summaries.
func baseMetric(m string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(m, s); ok && (strings.HasSuffix(b, "_seconds") || strings.HasSuffix(b, "_bytes") || strings.HasSuffix(b, "_rows") || strings.HasSuffix(b, "_batch")) {
			return b
		}
	}
	return m
}

// alertExprs returns every rule expression of alerts.yml.
func alertExprs(t *testing.T) []string {
	t.Helper()
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
				For   string `yaml:"for"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(read(t, "deploy", "prometheus", "alerts.yml"), &f); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("group %s: a rule without alert name or expr", g.Name)
			}
			out = append(out, r.Expr)
		}
	}
	return out
}

type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(read(t, "deploy", "grafana", "dashboards", "sluice.json"), &d); err != nil {
		t.Fatalf("parsing the dashboard: %v", err)
	}
	return d
}

// TestGrafanaProvisioning checks the datasource and dashboard provisioning
// files and that every panel queries the provisioned Prometheus.
func TestGrafanaProvisioning(t *testing.T) {
	var ds struct {
		Datasources []struct {
			Name, UID, Type, URL string
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(read(t, "deploy", "grafana", "provisioning", "datasources", "prometheus.yaml"), &ds); err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	for _, d := range ds.Datasources {
		uids[d.UID] = d.Type
	}
	if uids["prometheus"] != "prometheus" {
		t.Fatalf("no prometheus datasource with uid prometheus: %+v", ds)
	}
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(read(t, "deploy", "grafana", "provisioning", "dashboards", "sluice.yaml"), &prov); err != nil {
		t.Fatal(err)
	}
	if len(prov.Providers) != 1 || prov.Providers[0].Options.Path != "/var/lib/grafana/dashboards" {
		t.Fatalf("dashboard provider: %+v", prov)
	}
	d := loadDashboard(t)
	if d.UID != "sluice" || len(d.Panels) < 10 {
		t.Fatalf("dashboard %q with %d panels", d.UID, len(d.Panels))
	}
	titles := map[string]bool{}
	for _, p := range d.Panels {
		titles[p.Title] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || uids[p.Datasource.UID] == "" {
			t.Errorf("panel %q has no provisioned datasource", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
	for _, want := range []string{"Throughput per stage", "Lag per stage", "Buffered bytes", "Flush duration", "Publish latency", "Dead letters"} {
		if !titles[want] {
			t.Errorf("the dashboard has no %q panel or row", want)
		}
	}
}

// TestMetricNamesExist checks that every sluice_* metric the alerts and the
// dashboard use is registered by some Go code in services/ or shared/, or
// is on the reported proposedMetrics list.
func TestMetricNamesExist(t *testing.T) {
	used := map[string]bool{}
	for _, e := range alertExprs(t) {
		for _, m := range metricRe.FindAllString(e, -1) {
			used[baseMetric(m)] = true
		}
	}
	for _, p := range loadDashboard(t).Panels {
		for _, q := range p.Targets {
			for _, m := range metricRe.FindAllString(q.Expr, -1) {
				used[baseMetric(m)] = true
			}
		}
	}
	registered := map[string]bool{}
	nameRe := regexp.MustCompile(`"(sluice_[a-z0-9_]+)"`)
	for _, dir := range []string{"services", "shared"} {
		err := filepath.WalkDir(filepath.Join(repo(t), dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range nameRe.FindAllStringSubmatch(string(b), -1) {
				registered[m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for m := range used {
		names = append(names, m)
	}
	sort.Strings(names)
	for _, m := range names {
		if !strings.HasPrefix(m, "sluice_") {
			continue // up, jetstream_* come from Prometheus and the NATS exporter
		}
		owner, proposed := proposedMetrics[m]
		switch {
		case registered[m] && proposed:
			t.Errorf("%s is registered now: remove it from proposedMetrics", m)
		case !registered[m] && !proposed:
			t.Errorf("%s is used by alerts.yml or the dashboard but no service registers it", m)
		case !registered[m]:
			t.Logf("proposed metric, not registered yet: %s (%s)", m, owner)
		}
	}
}

// TestPromtool validates prometheus.yml and alerts.yml with promtool and
// runs the alert unit tests in deploy/prometheus/alerts_test.yml (each
// alert that matters fires on a bad series and stays quiet on a good one).
func TestPromtool(t *testing.T) {
	promtool, ok := tool("promtool")
	if !ok {
		t.Skip("promtool not found (apt-get install prometheus, or put it in ~/.cache/sluice/bin): only the YAML checks ran")
	}
	dir := filepath.Join(repo(t), "deploy", "prometheus")
	// prometheus.yml names the rules by their path in the container.
	cfg := strings.ReplaceAll(string(read(t, "deploy", "prometheus", "prometheus.yml")), "/etc/prometheus/", dir+"/")
	tmp := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(tmp, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"check", "config", "--syntax-only", tmp},
		{"check", "rules", filepath.Join(dir, "alerts.yml")},
		{"test", "rules", filepath.Join(dir, "alerts_test.yml")},
	} {
		cmd := exec.CommandContext(ctx, promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestPrometheusScrapesEveryService checks that prometheus.yml discovers
// every sluice service by compose DNS (so scaled replicas are all scraped).
func TestPrometheusScrapesEveryService(t *testing.T) {
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName      string `yaml:"job_name"`
			MetricsPath  string `yaml:"metrics_path"`
			DNSSDConfigs []struct {
				Names []string `yaml:"names"`
				Type  string   `yaml:"type"`
				Port  int      `yaml:"port"`
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(read(t, "deploy", "prometheus", "prometheus.yml"), &cfg); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sc := range cfg.ScrapeConfigs {
		for _, d := range sc.DNSSDConfigs {
			if d.Type == "A" && d.Port == 8080 {
				names = append(names, d.Names...)
			}
		}
	}
	for _, s := range pipelineServices {
		if !slices.Contains(names, s) {
			t.Errorf("prometheus.yml does not discover %s by DNS (names %v)", s, names)
		}
	}
	if !slices.Contains(cfg.RuleFiles, "/etc/prometheus/alerts.yml") {
		t.Errorf("rule_files %v does not load alerts.yml", cfg.RuleFiles)
	}
}
