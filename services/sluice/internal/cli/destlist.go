package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
)

// listPage is how many destinations one API call of `destinations list`
// asks for.
const listPage = 5000

// listDestinations pages through GET /api/v1/destinations/list and prints
// every destination: a table, or with asJSON one JSON array written as
// the pages arrive.
func listDestinations(ctx context.Context, c *client, target url.Values, only string, asJSON bool, out io.Writer) error {
	q := url.Values{"limit": {fmt.Sprint(listPage)}}
	for k, v := range target {
		q[k] = v
	}
	if only != "" {
		q.Set("state", only)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if asJSON {
		fmt.Fprint(out, "[")
	} else {
		fmt.Fprintln(tw, "DESTINATION\tSTATE\tPARTITION\tCURSOR\tFLUSHED_AT\tBUFFERED_ROWS\tREASON")
	}
	n := 0
	for {
		var page api.KnownDestinationsPage
		if err := c.get(ctx, "/api/v1/destinations/list", q, &page); err != nil {
			return fmt.Errorf("listing destinations: %w", err)
		}
		for _, d := range page.Destinations {
			if asJSON {
				b, err := json.Marshal(d)
				if err != nil {
					return err
				}
				if n > 0 {
					fmt.Fprint(out, ",")
				}
				fmt.Fprintf(out, "\n  %s", b)
			} else {
				part, cursor, flushed, buffered := "-", "-", "-", "-"
				if d.Partition != nil {
					part = fmt.Sprint(*d.Partition)
				}
				if d.Cursor != "" {
					cursor = d.Cursor
				}
				if d.FlushedAt != nil {
					flushed = d.FlushedAt.UTC().Format(time.RFC3339)
				}
				if d.Live != nil {
					buffered = fmt.Sprint(d.Live.BufferedRows)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Destination, d.State, part, cursor, flushed, buffered, d.Reason)
			}
			n++
		}
		if page.Next == "" {
			break
		}
		q.Set("after", page.Next)
	}
	if asJSON {
		if n > 0 {
			fmt.Fprint(out, "\n")
		}
		_, err := fmt.Fprintln(out, "]")
		return err
	}
	return tw.Flush()
}
