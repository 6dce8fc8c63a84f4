package cli

// sluice destinations purge NAME --yes: erase a retired destination from
// every pack, segment and catalog table (api/purge.go, catalog purge.go),
// waiting until nothing of it remains.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
)

func newDestinationsPurgeCmd(g *globalFlags) *cobra.Command {
	var yes, asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "purge NAME --yes",
		Short: "Erase a retired destination's rows from every pack, segment and catalog table (asks for --yes)",
		Long: `Erase a retired destination: the active publisher rewrites every segment that holds its rows
beside other destinations (their reads are unchanged), publishes a snapshot without it, expires
every older snapshot (they all hold it) and deletes its files and catalog rows without waiting for
catalog.gc_grace. A pinned snapshot that holds it blocks the purge (the error names the pin:
unpin it first). The command waits, printing progress, until nothing of it remains.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkName(name); err != nil {
				return err
			}
			if !yes {
				return &exitError{2, fmt.Errorf("purging %s erases its rows for good: run again with --yes", name)}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			path := "/api/v1/destinations/" + name + "/purge"
			var st api.PurgeStatus
			if err := c.do(ctx, http.MethodPost, path, nil, struct{}{}, &st); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if st.DeadLettersErased > 0 && !asJSON {
				fmt.Fprintf(out, "%s: erased its %d dead letters from the DLQ\n", name, st.DeadLettersErased)
			}
			deadline := time.Now().Add(timeout)
			last := ""
			for {
				line := fmt.Sprintf("%s: %d members, %d inventory rows, %d rows remain (%s)", name, st.Members, st.InventoryRows, st.Rows, st.Request)
				if !asJSON && line != last && !st.Done {
					fmt.Fprintln(out, line)
					last = line
				}
				switch {
				case st.Done:
					if asJSON {
						return json.NewEncoder(out).Encode(st)
					}
					fmt.Fprintf(out, "%s: purged: no pack, segment or catalog row holds it\n", name)
					printRemains(out, st.Remains)
					return nil
				case st.Request == "failed":
					return &exitError{1, fmt.Errorf("purging %s failed: %s", name, st.Message)}
				case time.Now().After(deadline):
					return &exitError{1, fmt.Errorf("purging %s: not done after %s (%s)", name, timeout, line)}
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Second):
				}
				if err := c.do(ctx, http.MethodGet, path, nil, nil, &st); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "purge without asking (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the final status as JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up waiting after this long")
	return cmd
}

// printRemains says what a purge of the catalog and the packs left that
// still holds the destination's rows or its name, and when it goes.
func printRemains(out io.Writer, rs []api.Remaining) {
	for _, r := range rs {
		what := r.What
		if r.Count > 0 {
			what = fmt.Sprintf("%d %s", r.Count, r.What)
		}
		when := "stays"
		if r.Until != nil {
			when = "gone by " + r.Until.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(out, "  still: %s (%s): %s\n", what, when, r.How)
	}
}
