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

func buildComponents(ctx context.Context, cfg config.Config, st *stack.Stack, names []string) ([]stack.Component, error) {
	var out []stack.Component
	for _, name := range names {
		var c stack.Component
		// One NATS connection per service when a process hosts several
		// (see stack.Connect).
		nc, js := st.NC, st.JS
		if len(names) > 1 {
			var err error
			if nc, js, err = st.Connect(ctx, name); err != nil {
				return nil, err
			}
		}
		switch name {
		case "reader":
			r, err := reader.New(cfg, reader.Deps{JS: js, Log: telemetry.NewLogger(cfg.Telemetry, "reader"), Metrics: st.Registry, State: st.State})
			if err != nil {
				return nil, fmt.Errorf("starting the reader: %w", err)
			}
			c = stack.Component{Name: name, Run: r.Run, Status: func() any { return r.Status() }}
		case "router":
			r, err := router.New(cfg, router.Deps{JS: js, Log: telemetry.NewLogger(cfg.Telemetry, "router"), Metrics: st.Registry, Pool: st.State})
			if err != nil {
				return nil, fmt.Errorf("starting the router: %w", err)
			}
			c = stack.Component{Name: name, Run: r.Run, Status: func() any { return r.Status() }}
		case "flusher":
			f, err := flusher.New(cfg, flusher.Deps{JS: js, NC: nc, Log: telemetry.NewLogger(cfg.Telemetry, "flusher"), Metrics: st.Registry, Pool: st.State, Store: st.Packs})
			if err != nil {
				return nil, fmt.Errorf("starting the flusher: %w", err)
			}
			c = stack.Component{Name: name, Run: f.Run, Status: func() any { return f.Status() }}
		case "indexer":
			i, err := indexer.New(cfg, indexer.Deps{JS: js, Log: telemetry.NewLogger(cfg.Telemetry, "indexer"), Metrics: st.Registry, Catalog: st.Catalog, Packs: st.Packs})
			if err != nil {
				return nil, fmt.Errorf("starting the indexer: %w", err)
			}
			c = stack.Component{Name: name, Run: i.Run, Status: func() any { return i.Status() }}
		case "publisher":
			p, err := publisher.New(cfg, publisher.Deps{JS: js, Log: telemetry.NewLogger(cfg.Telemetry, "publisher"), Metrics: st.Registry, Catalog: st.Catalog})
			if err != nil {
				return nil, fmt.Errorf("starting the publisher: %w", err)
			}
			c = stack.Component{Name: name, Run: p.Run, Status: func() any { return p.Status() }}
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
	return api.CatalogReads{C: catalog.New(st.Catalog, catalog.Options{Prefix: st.Cfg.Catalog.Prefix, Log: st.Log})}
}
