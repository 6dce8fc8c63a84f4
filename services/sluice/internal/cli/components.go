package cli

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/services/flusher"
	"github.com/sluice-cdc/sluice/services/indexer"
	"github.com/sluice-cdc/sluice/services/publisher"
	"github.com/sluice-cdc/sluice/services/reader"
	"github.com/sluice-cdc/sluice/services/router"
	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/services/sluice/internal/demo"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/stack"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// specs is every service's assembly (services/<name>/component.go), the
// same the service binaries build from.
var specs = map[string]stack.Spec{
	"reader":    reader.Spec,
	"router":    router.Spec,
	"flusher":   flusher.Spec,
	"indexer":   indexer.Spec,
	"publisher": publisher.Spec,
}

// specsOf returns the specs of names, in order.
func specsOf(names []string) ([]stack.Spec, error) {
	out := make([]stack.Spec, 0, len(names))
	for _, n := range names {
		s, ok := specs[n]
		if !ok {
			return nil, fmt.Errorf("unknown service %q", n)
		}
		out = append(out, s)
	}
	return out, nil
}

// buildComponents builds the services of one process from their specs. A
// service alone in its process gets its process-wide settings (Spec.Alone),
// as its binary does.
func buildComponents(ctx context.Context, cfg config.Config, st *stack.Stack, ss []stack.Spec) ([]stack.Component, error) {
	var out []stack.Component
	for _, s := range ss {
		// One NATS connection per service when a process hosts several
		// (see stack.Connect).
		own := stack.Own{JS: st.JS, Log: telemetry.NewLogger(cfg.Telemetry, s.Name)}
		if len(ss) > 1 {
			_, js, err := st.Connect(ctx, s.Name)
			if err != nil {
				return nil, err
			}
			own.JS = js
		} else if s.Alone != nil {
			s.Alone(cfg, own.Log)
		}
		c, err := s.Build(cfg, st, own)
		if err != nil {
			return nil, fmt.Errorf("starting the %s: %w", s.Name, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func setupDemo(ctx context.Context, cfg config.Config) error {
	pool, err := pgxpool.New(ctx, cfg.Source.DSN)
	if err != nil {
		return fmt.Errorf("connecting to the demo database: %w", err)
	}
	defer pool.Close()
	return demo.Setup(ctx, pool, cfg.Demo.Tenants)
}

func runDemoTraffic(ctx context.Context, cfg config.Config, st *stack.Stack) {
	pool, err := pgxpool.New(ctx, cfg.Source.DSN)
	if err != nil {
		st.Log.Error("demo traffic: connecting", "err", err)
		return
	}
	defer pool.Close()
	_ = demo.Traffic(ctx, pool, cfg.Demo.Tenants, cfg.Demo.Rate, st.Log.With("service", "demo"))
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the build's wire and catalog versions",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Println("sluice", version)
		},
	}
}

// version is set at build time with -ldflags "-X ...cli.version=...".
var version = "dev"

// catalogReads gives the API the catalog's reads when this process has a
// catalog connection.
func catalogReads(st *stack.Stack) api.Reads {
	if st.Catalog == nil {
		return nil
	}
	return api.CatalogReads{C: catalog.New(st.Catalog, catalog.Options{Prefix: st.Cfg.Catalog.Prefix, Log: st.Log, GCGrace: st.Cfg.Catalog.GCGrace})}
}
