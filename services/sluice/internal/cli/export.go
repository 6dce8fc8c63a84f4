package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/services/sluice/internal/export"
)

func newExportCmd(g *globalFlags) *cobra.Command {
	var table, format, out string
	var snapshot uint64
	var target *targetFlags
	cmd := &cobra.Command{
		Use:   "export (--destination D | --value V) --format parquet|arrow|csv|jsonl --out DIR",
		Short: "A destination's tables at a snapshot as files, one per table",
		Long: `A destination's tables at a snapshot (default: the latest published) as files in DIR, one
per table, named SCHEMA.TABLE.FORMAT: Parquet or an Arrow IPC file (each column in the Arrow
type it travels as; readable by DuckDB, pandas, ClickHouse), CSV, or JSON lines (each line
what 'sluice read' prints). Every table is read at the same snapshot.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			q, err := target.query()
			if err != nil {
				return err
			}
			f, err := export.ParseFormat(format)
			if err != nil {
				return &exitError{2, err}
			}
			if table != "" {
				if err := proto.ValidateTable(table); err != nil {
					return &exitError{2, err}
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if snapshot == 0 {
				var s api.Snapshot
				if err := c.get(ctx, "/api/v1/snapshots/latest", nil, &s); err != nil {
					return err
				}
				snapshot = s.Version
			}
			q.Set("snapshot", strconv.FormatUint(snapshot, 10))
			tables := []string{table}
			if table == "" {
				var tp api.TablesPage
				if err := c.get(ctx, "/api/v1/tables", q, &tp); err != nil {
					return err
				}
				tables = tp.Tables
			}
			// Each name becomes a path under --out: only a canonical
			// schema.table may (no separator, no .., nothing absolute),
			// whatever the server says.
			for _, t := range tables {
				if err := proto.ValidateTable(t); err != nil {
					return fmt.Errorf("the server listed a table this command will not make a file of: %w", err)
				}
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("creating %s: %w", out, err)
			}
			if len(tables) == 0 {
				fmt.Fprintf(os.Stderr, "no table holds rows of this destination at snapshot %d\n", snapshot)
			}
			for i, t := range tables {
				q.Set("table", t)
				q.Set("format", string(f))
				label := fmt.Sprintf("%s (%d/%d)", t, i+1, len(tables))
				path, err := exportPath(out, t, f)
				if err != nil {
					return err
				}
				rows, size, err := c.exportTable(ctx, q, path, label)
				if err != nil {
					return fmt.Errorf("exporting %s: %w", t, err)
				}
				fmt.Printf("%s\t%d rows\t%d bytes\tsnapshot %d\n", path, rows, size, snapshot)
			}
			return nil
		},
	}
	target = addTargetFlags(cmd, true, "export")
	cmd.Flags().StringVar(&table, "table", "", "only this table, schema.table (default: every table of the destination)")
	cmd.Flags().Uint64Var(&snapshot, "snapshot", 0, "snapshot version (default: the latest published)")
	cmd.Flags().StringVar(&format, "format", "", "parquet, arrow, csv or jsonl")
	cmd.Flags().StringVar(&out, "out", "", "directory to write the files into (created if missing)")
	_ = cmd.MarkFlagRequired("format")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// exportPath is the file of table t under out, refused unless it is a
// plain file name directly in out.
func exportPath(out, t string, f export.Format) (string, error) {
	name := export.FileName(t, f)
	if name != filepath.Base(name) || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("table %q: its file name %q is not a plain name in %s", t, name, out)
	}
	return filepath.Join(out, name), nil
}

// exportTable streams GET /api/v1/export?q into path (through a temporary
// file renamed at the end, so a failed export leaves no partial file under
// the final name), with a progress bar on a terminal. It fails when the
// server did not send the row-count trailer, which it sends only after the
// whole file.
func (c *client) exportTable(ctx context.Context, q url.Values, path, label string) (rows, size int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/export?"+q.Encode(), nil)
	if err != nil {
		return 0, 0, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// No overall timeout: a large table takes as long as it takes; ctx
	// (Ctrl-C) ends it.
	resp, err := (&http.Client{Transport: c.http.Transport}).Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("calling %s: %w (is the pipeline running?)", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e api.Error
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return 0, 0, &apiError{resp.StatusCode, e.Error}
		}
		return 0, 0, &apiError{resp.StatusCode, strings.TrimSpace(string(b))}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".export-*")
	if err != nil {
		return 0, 0, fmt.Errorf("creating a file in %s: %w", filepath.Dir(path), err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	bar := progressbar.NewOptions64(-1,
		progressbar.OptionSetDescription(label),
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetVisibility(term.IsTerminal(int(os.Stderr.Fd()))),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	size, err = io.Copy(io.MultiWriter(tmp, bar), resp.Body)
	_ = bar.Finish()
	if err != nil {
		return 0, 0, fmt.Errorf("receiving the file: %w", err)
	}
	n := resp.Trailer.Get(api.TrailerRowsTotal)
	if n == "" {
		return 0, 0, fmt.Errorf("the server ended the file early (%d bytes, no %s trailer): see its log", size, api.TrailerRowsTotal)
	}
	if rows, err = strconv.ParseInt(n, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("reading the %s trailer %q: %w", api.TrailerRowsTotal, n, err)
	}
	if err = tmp.Sync(); err == nil {
		err = tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("writing %s: %w", path, err)
	}
	return rows, size, nil
}
