package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/services/sluice/internal/demo"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/pgcluster"
	"github.com/sluice-cdc/sluice/shared/secret"
	"github.com/sluice-cdc/sluice/shared/stack"
)

// serviceNames in pipeline order: shutdown stops them in this order so that
// each stage drains into a stage that is still running.
var serviceNames = []string{"reader", "router", "flusher", "indexer", "publisher"}

func newDevCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "The whole pipeline in one process (embedded NATS, chDB, local packs); without source.dsn a private Postgres with the demo",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadConfig(true)
			if err != nil {
				return &exitError{2, err}
			}
			return runProcess(cmd.Context(), cfg, "dev", serviceNames)
		},
	}
}

func newRunCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:       "run reader|router|flusher|indexer|publisher",
		Short:     "Run one service (for running the pipeline as separate processes)",
		Args:      cobra.ExactArgs(1),
		ValidArgs: serviceNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.loadConfig(false)
			if err != nil {
				return &exitError{2, err}
			}
			return RunService(cmd.Context(), cfg, args[0])
		},
	}
}

// RunService runs one service until ctx ends; each service's own binary
// calls it too.
func RunService(ctx context.Context, cfg config.Config, name string) error {
	for _, n := range serviceNames {
		if n == name {
			return runProcess(ctx, cfg, name, []string{name})
		}
	}
	return &exitError{2, fmt.Errorf("unknown service %q: want one of %v", name, serviceNames)}
}

// runProcess opens the stack for the given services, runs them and the HTTP
// server, and on ctx's end stops them in pipeline order.
func runProcess(ctx context.Context, cfg config.Config, process string, names []string) error {
	dev := process == "dev"
	var demoCluster *pgcluster.Cluster
	if dev && cfg.Source.DSN == "" {
		cl, err := startDemo(ctx, &cfg)
		if err != nil {
			return err
		}
		demoCluster = cl
		defer cl.Stop(context.Background())
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{2, err}
	}
	ss, err := specsOf(names)
	if err != nil {
		return &exitError{2, err}
	}
	needs := stack.NeedsOf(ss...)
	needs.EmbeddedNATS = dev
	st, err := stack.Open(ctx, cfg, process, needs)
	if errors.Is(err, stack.ErrDataDirInUse) {
		return &exitError{2, err}
	}
	if err != nil {
		return err
	}
	defer st.Close(context.Background())

	comps, err := buildComponents(ctx, cfg, st, ss)
	if err != nil {
		return err
	}
	statuses, summaries := map[string]func() any{}, map[string]func() any{}
	for _, c := range comps {
		statuses[c.Name], summaries[c.Name] = c.Status, c.Status
		if c.Summary != nil {
			summaries[c.Name] = c.Summary
		}
	}
	sa, closeStates := destinationStates(ctx, st)
	defer closeStates()
	lk := links(cfg, st)
	series := api.Register(st.HTTP, api.Deps{Reads: catalogReads(st), JS: st.JS, Config: cfg, Statuses: statuses, Summaries: summaries, Log: st.Log,
		States: sa.states, Resyncs: sa.resyncs, Halts: sa.halts, Tokens: sa.tokens, Links: lk})

	var traffic sync.WaitGroup
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	traffic.Add(1)
	go func() { // the UI's charts: samples of the statuses above
		defer traffic.Done()
		series.Run(trafficCtx)
	}()
	if demoCluster != nil {
		traffic.Add(1)
		go func() {
			defer traffic.Done()
			runDemoTraffic(trafficCtx, cfg, st)
		}()
	}
	st.Log.Info("sluice started", "process", process, "services", names, "ui", "http://"+st.HTTP.Addr()+"/ui")
	printSummary(os.Stderr, process, names, cfg, st, lk, demoCluster != nil)
	runErr := st.Serve(ctx, comps)
	stopTraffic()
	traffic.Wait()
	st.Log.Info("sluice stopped", "process", process)
	return runErr
}

// DemoPasswordFile holds the password of the demo Postgres of `sluice
// dev` (user postgres): <data_dir>/pg_password, 0600.
func DemoPasswordFile(dataDir string) string { return filepath.Join(dataDir, "pg_password") }

func startDemo(ctx context.Context, cfg *config.Config) (*pgcluster.Cluster, error) {
	dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "pg"))
	if err != nil {
		return nil, err
	}
	if err := secret.DataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "no source.dsn: starting a private Postgres for the demo under %s\n", dir)
	// Owned: a server left running by a crashed `sluice dev` (its owner
	// gone) is stopped and started afresh; one whose owner still runs is
	// refused rather than shared.
	// The demo's superuser has a password (generated on first start,
	// <data_dir>/pg_password, 0600): loopback is every local user's, and the
	// database holds every tenant. The services get it in cfg.Source.DSN.
	pw, _, err := secret.ReadOrCreate(DemoPasswordFile(cfg.DataDir))
	if err != nil {
		return nil, fmt.Errorf("reading the demo Postgres password: %w", err)
	}
	cl, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Owned: true, Password: pw})
	if errors.Is(err, pgcluster.ErrOwned) {
		return nil, &exitError{2, fmt.Errorf("starting the demo Postgres: %w (is another sluice dev running on data_dir %s?)", err, cfg.DataDir)}
	}
	if err != nil {
		return nil, fmt.Errorf("starting the demo Postgres: %w", err)
	}
	if pid := cl.StoppedStale(); pid != 0 {
		fmt.Fprintf(os.Stderr, "stopped the demo Postgres left running by process %d, which has exited, and started it afresh\n", pid)
	}
	if err := cl.CreateDatabase(ctx, "demo"); err != nil {
		cl.Stop(context.Background())
		return nil, fmt.Errorf("creating the demo database: %w", err)
	}
	cfg.Source.DSN = cl.DSN("demo")
	cfg.Source.Tables = demo.Tables
	cfg.Source.Backfill = true
	if err := setupDemo(ctx, *cfg); err != nil {
		cl.Stop(context.Background())
		return nil, err
	}
	return cl, nil
}
