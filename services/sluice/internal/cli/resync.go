package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/state"
)

func newResyncCmd(g *globalFlags) *cobra.Command {
	var table string
	var wait, list, asJSON bool
	var timeout time.Duration
	var target *targetFlags
	cmd := &cobra.Command{
		Use:   "resync --table SCHEMA.TABLE [--destination D | --value V] [--wait] | --list [--json]",
		Short: "Re-copy a table, or one destination's rows of it, while the stream keeps flowing",
		Long: `Re-copy a table, or one destination's rows of it, while the stream keeps flowing for every
other table and tenant. The reader copies it in primary-key chunks (source.resync_chunk_rows),
each bracketed by watermarks in the WAL, so a row the stream changes meanwhile keeps the
stream's version; at the end, rows that no longer exist at the source are deleted. A resync
of a halted table clears its halt when it completes. Several may be queued; one runs per
table at a time; a reader that dies mid-resync continues from its last chunk.

--wait shows the progress (a bar on a terminal, lines otherwise) and exits 0 once a published
snapshot holds the whole resync, non-zero when it fails. --list shows queued, running and
finished resyncs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if list {
				if table != "" || target.given() || wait {
					return &exitError{2, errors.New("--list takes no --table, --destination, --value or --wait")}
				}
				var rs []state.Resync
				if err := c.get(cmd.Context(), "/api/v1/resyncs", nil, &rs); err != nil {
					return err
				}
				return printResyncs(out, rs, asJSON)
			}
			if table == "" {
				return &exitError{2, errors.New("name the table: --table SCHEMA.TABLE (or --list)")}
			}
			req := api.ResyncRequest{Table: table}
			switch {
			case cmd.Flags().Changed("destination"):
				if err := checkName(target.name); err != nil {
					return err
				}
				req.Destination = target.name
			case cmd.Flags().Changed("value"):
				v := target.value
				req.Value = &v
			}
			var r state.Resync
			if err := c.do(cmd.Context(), http.MethodPost, "/api/v1/resyncs", nil, req, &r); err != nil {
				return err
			}
			if asJSON && !wait {
				return json.NewEncoder(out).Encode(r)
			}
			fmt.Fprintf(out, "resync %d of %s%s queued\n", r.ID, r.Table, scopeLabel(r))
			if !wait {
				fmt.Fprintf(out, "follow it with: sluice resync --list\n")
				return nil
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			return waitResync(ctx, c, r.ID, os.Stderr, term.IsTerminal(int(os.Stderr.Fd())))
		},
	}
	cmd.Flags().StringVar(&table, "table", "", "the table to re-copy (SCHEMA.TABLE, as listed in source.tables)")
	target = addTargetFlags(cmd, false, "re-copy only")
	cmd.Flags().BoolVar(&wait, "wait", false, "show the progress and exit once a published snapshot holds the resync (0) or it fails (1)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --wait: give up after this long (exit 1); 0 waits as long as it takes")
	cmd.Flags().BoolVar(&list, "list", false, "list queued, running and finished resyncs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func scopeLabel(r state.Resync) string {
	switch {
	case r.Destination != "":
		return " (destination " + r.Destination + ")"
	case r.Value != nil:
		return fmt.Sprintf(" (routing value %q)", *r.Value)
	}
	return ""
}

func printResyncs(out io.Writer, rs []state.Resync, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(out).Encode(rs)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTABLE\tSCOPE\tSTATE\tROWS\tESTIMATED\tCHUNKS\tREQUESTED\tEND_LSN\tERROR")
	for _, r := range rs {
		scope := "all"
		if r.Destination != "" {
			scope = r.Destination
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", r.ID, r.Table, scope, r.State, r.Rows, r.Estimated, r.Chunks,
			r.RequestedAt.UTC().Format(time.RFC3339), r.EndLSN, r.Error)
	}
	return tw.Flush()
}

// rowsOfEstimate renders a copy's progress against the table's estimated
// size. The estimate is pg_class.reltuples, which is -1 for a table never
// vacuumed or analyzed (and 0 for one that looked empty): then the size is
// unknown, and saying "of ~-1" would be a wrong number.
func rowsOfEstimate(rows, estimated int64) string {
	if estimated <= 0 {
		return fmt.Sprintf("%d rows (size unknown)", rows)
	}
	return fmt.Sprintf("%d of ~%d rows", rows, estimated)
}

// waitResync follows resync id until a published snapshot holds it:
// a progress bar on a terminal (rows copied of estimated, chunks, rate and
// ETA), a line per chunk otherwise.
func waitResync(ctx context.Context, c *client, id int64, w io.Writer, tty bool) error {
	var bar *progressbar.ProgressBar
	if tty {
		bar = progressbar.NewOptions64(-1,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(fmt.Sprintf("resync %d", id)),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("rows"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionFullWidth(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	started := time.Now()
	var lastChunks int64 = -1
	var r state.Resync
	for {
		err := c.get(ctx, "/api/v1/resyncs/"+strconv.FormatInt(id, 10), nil, &r)
		if err != nil {
			if ctx.Err() != nil {
				return &exitError{1, fmt.Errorf("stopped waiting for resync %d: %w", id, ctx.Err())}
			}
			return err
		}
		rate := float64(r.Rows) / max(time.Since(started).Seconds(), 0.001)
		eta := ""
		if r.Estimated > r.Rows && rate > 0 {
			eta = (time.Duration(float64(r.Estimated-r.Rows)/rate) * time.Second).Round(time.Second).String()
		}
		if bar != nil {
			if r.Estimated > 0 && bar.GetMax64() != max(r.Estimated, r.Rows) {
				bar.ChangeMax64(max(r.Estimated, r.Rows))
			}
			bar.Describe(fmt.Sprintf("resync %d %s: %s, chunk %d", id, r.Table, r.State, r.Chunks))
			_ = bar.Set64(r.Rows)
		} else if r.Chunks != lastChunks {
			fmt.Fprintf(w, "resync %d %s: %s, %s, %d chunks, %.0f rows/s, eta %s\n", id, r.Table, r.State, rowsOfEstimate(r.Rows, r.Estimated), r.Chunks, rate, eta)
		}
		lastChunks = r.Chunks
		switch r.State {
		case state.ResyncFailed:
			if bar != nil {
				_ = bar.Exit()
			}
			return &exitError{1, fmt.Errorf("resync %d of %s failed: %s", id, r.Table, r.Error)}
		case state.ResyncDone:
			if bar != nil {
				_ = bar.Finish()
			}
			end, err := proto.ParseLSN(r.EndLSN)
			if err != nil {
				return fmt.Errorf("resync %d: end_lsn %q: %w", id, r.EndLSN, err)
			}
			fmt.Fprintf(w, "resync %d of %s: %d rows copied in %d chunks (%d left to the stream); waiting for a snapshot through %s\n",
				id, r.Table, r.Rows, r.Chunks, r.Dropped, end)
			return waitPublished(ctx, c, id, end, w)
		}
		select {
		case <-ctx.Done():
			return &exitError{1, fmt.Errorf("stopped waiting for resync %d (%s, %d rows): %w", id, r.State, r.Rows, ctx.Err())}
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitPublished waits until the latest snapshot's through_lsn covers end.
func waitPublished(ctx context.Context, c *client, id int64, end proto.LSN, w io.Writer) error {
	for {
		var s api.Snapshot
		err := c.get(ctx, "/api/v1/snapshots/latest", nil, &s)
		var ae *apiError
		switch {
		case err == nil:
			if got, perr := proto.ParseLSN(s.ThroughLSN); perr == nil && got >= end {
				fmt.Fprintf(w, "resync %d published: snapshot %d is through %s\n", id, s.Version, s.ThroughLSN)
				return nil
			}
		case errors.As(err, &ae) && ae.Status == 404:
		case ctx.Err() != nil:
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return &exitError{1, fmt.Errorf("resync %d is done but no snapshot through %s was published yet: %w", id, end, ctx.Err())}
		case <-time.After(250 * time.Millisecond):
		}
	}
}
