package stack

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-cdc/sluice/shared/config"
)

// Main is the whole of a service binary's main: flags, config, signals, the
// stack, the component and its status endpoint. It returns the exit code.
func Main(spec Spec) int {
	service := spec.Name
	fs := flag.NewFlagSet(service, flag.ContinueOnError)
	path := fs.String("config", "./sluice.yaml", "config file (YAML); every key can be overridden by SLUICE_<SECTION>_<KEY>")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	cfg, err := config.Load(*path, false)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", service, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, cfg, spec); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", service, err)
		return 1
	}
	return 0
}

// Run opens the stack, builds one service and serves it until ctx ends.
func Run(ctx context.Context, cfg config.Config, spec Spec) error {
	service := spec.Name
	st, err := Open(ctx, cfg, service, spec.Needs)
	if err != nil {
		return err
	}
	defer st.Close(context.Background())
	if spec.Alone != nil {
		spec.Alone(cfg, st.Log)
	}
	c, err := spec.Build(cfg, st, Own{JS: st.JS, Log: st.Log})
	if err != nil {
		return fmt.Errorf("starting %s: %w", service, err)
	}
	st.HTTP.Handle("GET /api/v1/status", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"services": map[string]any{service: c.Status()}})
	}))
	st.Log.Info("service started", "service", service, "http", st.HTTP.Addr())
	err = st.Serve(ctx, []Component{c})
	st.Log.Info("service stopped", "service", service)
	return err
}
