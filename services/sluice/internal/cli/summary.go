package cli

import (
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/stack"
)

// links are where this process's embedded NATS server, its monitoring and
// Jaeger are (empty when not set up).
func links(cfg config.Config, st *stack.Stack) api.Links {
	l := api.Links{JaegerUI: strings.TrimRight(cfg.Telemetry.JaegerUI, "/")}
	if st.NATS != nil {
		l.NATS = st.NATS.ClientURL()
		if m := st.NATS.MonitorAddr(); m != nil {
			l.NATSMonitor = "http://" + m.String()
		}
	}
	return l
}

// printSummary writes what a process runs and where to look, once at
// start-up, for the person who started it.
func printSummary(w io.Writer, process string, names []string, cfg config.Config, st *stack.Stack, l api.Links, demo bool) {
	var b strings.Builder
	what := strings.Join(names, ", ")
	if process == "dev" {
		fmt.Fprintf(&b, "sluice dev is running %s in one process\n", what)
	} else {
		fmt.Fprintf(&b, "sluice %s is running\n", what)
	}
	row := func(k, v string) { fmt.Fprintf(&b, "  %-9s %s\n", k, v) }
	if addr := st.HTTP.Addr(); addr != "" {
		base := "http://" + addr
		row("UI", base+"/ui")
		row("API", base+"/api/v1/status")
		row("metrics", base+"/metrics")
	}
	switch {
	case l.NATS != "" && cfg.NATS.Token == "" && st.Cfg.NATS.Token != "":
		// The token stack generated (stack.NATSTokenFile); the nats CLI
		// takes a token as --user.
		row("NATS", l.NATS+"   (nats stream ls -s "+l.NATS+" --user \"$(cat "+stack.NATSTokenFile(absDir(cfg.DataDir))+")\")")
	case l.NATS != "":
		row("NATS", l.NATS+"   (nats stream ls -s "+l.NATS+")")
	default:
		row("NATS", redactURL(cfg.NATS.URL))
	}
	if l.NATSMonitor != "" {
		row("NATS mon", l.NATSMonitor+"/jsz?consumers=true")
	}
	switch {
	case l.JaegerUI != "":
		row("traces", l.JaegerUI+"   (sluice trace --destination D)")
	case cfg.Telemetry.JaegerQuery != "" && st.HTTP.Addr() != "":
		// A Jaeger without a UI of its own (make run's): the web UI's
		// trace view reads it.
		row("traces", "http://"+st.HTTP.Addr()+"/ui?trace=ID, linked from each destination's packs   (Jaeger API "+
			strings.TrimRight(cfg.Telemetry.JaegerQuery, "/")+"; sluice trace --destination D)")
	case cfg.Telemetry.OTLPEndpoint != "":
		row("traces", "OTLP to "+cfg.Telemetry.OTLPEndpoint+" (telemetry.jaeger_ui names its UI)")
	default:
		row("traces", "not exported (set telemetry.otlp_endpoint)")
	}
	if demo {
		row("source", fmt.Sprintf("the demo: %d tenants, %g transactions/s", cfg.Demo.Tenants, cfg.Demo.Rate))
	} else if cfg.Source.DSN != "" && (process == "dev" || contains(names, "reader")) {
		row("source", redactURL(cfg.Source.DSN))
		if cfg.Source.PrimaryDSN != "" {
			row("primary", redactURL(cfg.Source.PrimaryDSN)+"   (sluice writes here; it decodes from source)")
		}
	}
	row("data", cfg.DataDir)
	if process == "dev" {
		b.WriteString("Ctrl-C drains and exits.\n")
	}
	_, _ = io.WriteString(w, b.String())
}

// redactURL drops the password of a URL (and its query, which may hold
// one) for printing.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		if strings.Contains(raw, "@") {
			return "(a URL with credentials)"
		}
		return raw
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	u.RawQuery = ""
	return u.String()
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

func absDir(d string) string {
	if a, err := filepath.Abs(d); err == nil {
		return a
	}
	return d
}
