package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/shared/config"
)

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

// Main runs the command line and returns the process exit code.
func Main(args []string) int {
	root := newRoot()
	root.SetArgs(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "sluice:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 2
}

type globalFlags struct {
	config string
	server string
}

func newRoot() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Multi-tenant change-data-capture fan-out: Postgres -> per-tenant Arrow packs -> ClickHouse snapshots",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.config, "config", "./sluice.yaml", "config file (YAML); every key can be overridden by SLUICE_<SECTION>_<KEY>")
	root.PersistentFlags().StringVar(&g.server, "server", "", "HTTP address of the running pipeline (default: http.listen from the config)")
	root.AddCommand(
		newDevCmd(g),
		newRunCmd(g),
		newStatusCmd(g),
		newSnapshotsCmd(g),
		newWaitCmd(g),
		newReadCmd(g),
		newExportCmd(g),
		newChangesCmd(g),
		newCatalogCmd(g),
		newDLQCmd(g), newSlotCmd(g),
		newDestinationsCmd(g), newTraceCmd(g),
		newResyncCmd(g),
		newTokensCmd(g),
		newVersionCmd(),
	)
	return root
}

// loadConfig reads the config for a command that runs services.
func (g *globalFlags) loadConfig(allowMissing bool) (config.Config, error) {
	return config.Load(g.config, allowMissing)
}
