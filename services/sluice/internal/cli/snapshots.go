package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
)

// snapshotPage is how many snapshots the CLI asks for per API page.
const snapshotPage = 1000

func newSnapshotsCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "snapshots",
		Short: "Retained snapshots: version, published_at, through_lsn, pack count, pinned",
		Long: `Retained snapshots, oldest first: version, published_at, through_lsn, pack count and
whether the snapshot is pinned. Snapshots older than catalog.snapshot_retention expire unless
pinned or among the newest catalog.snapshot_retain_min; an expired one is not listed and a
read of it fails naming the oldest retained version.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			snaps, err := allSnapshots(cmd.Context(), c)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(snaps)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "VERSION\tPUBLISHED_AT\tTHROUGH_LSN\tPACKS\tPINNED")
			for _, s := range snaps {
				pin := ""
				if s.Pinned {
					pin = "pinned"
					if s.PinReason != "" {
						pin += ": " + s.PinReason
					}
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\n", s.Version, s.PublishedAt.UTC().Format(time.RFC3339Nano), s.ThroughLSN, s.Packs, pin)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the snapshots as JSON")
	cmd.AddCommand(newPinCmd(g), newUnpinCmd(g))
	return cmd
}

// allSnapshots follows the API's pages (newest first, before=) and
// returns every retained snapshot, oldest first.
func allSnapshots(ctx context.Context, c *client) ([]api.Snapshot, error) {
	out := []api.Snapshot{}
	q := url.Values{"limit": {strconv.Itoa(snapshotPage)}}
	for {
		var page []api.Snapshot
		if err := c.get(ctx, "/api/v1/snapshots", q, &page); err != nil {
			return nil, err
		}
		out = append(page, out...)
		if len(page) < snapshotPage {
			return out, nil
		}
		q.Set("before", strconv.FormatUint(page[0].Version, 10))
	}
}

func parseVersion(arg string) (uint64, error) {
	v, err := strconv.ParseUint(arg, 10, 64)
	if err != nil || v == 0 {
		return 0, &exitError{2, fmt.Errorf("%q is not a snapshot version (a positive number)", arg)}
	}
	return v, nil
}

func newPinCmd(g *globalFlags) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "pin V",
		Short: "Pin snapshot V so it never expires",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := parseVersion(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var p api.Pin
			if err := c.do(cmd.Context(), http.MethodPost, "/api/v1/snapshots/"+strconv.FormatUint(v, 10)+"/pin", nil, api.PinRequest{Reason: reason}, &p); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "snapshot %d pinned\n", p.Version)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why it is pinned (shown by sluice snapshots)")
	return cmd
}

func newUnpinCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "unpin V",
		Short: "Unpin snapshot V: it expires again like any other",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := parseVersion(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var p api.Pin
			if err := c.do(cmd.Context(), http.MethodPost, "/api/v1/snapshots/"+strconv.FormatUint(v, 10)+"/unpin", nil, nil, &p); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "snapshot %d unpinned\n", v)
			return nil
		},
	}
}
