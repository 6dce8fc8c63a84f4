package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/services/sluice/internal/export"
	"github.com/sluice-cdc/sluice/shared/catalog"
)

// The columns a change's flat row carries before the table's in the Arrow
// and Parquet forms of `sluice changes` (under proto.SystemPrefix, so no
// source column collides with them).
const (
	changeOpColumn  = "_sluice_change"
	changePosColumn = "_sluice_position"
)

func newChangesCmd(g *globalFlags) *cobra.Command {
	var table, format string
	var from, to uint64
	var pageSize int
	var target *targetFlags
	cmd := &cobra.Command{
		Use:   "changes (--destination D | --value V) --table SCHEMA.TABLE --from V1 [--to V2]",
		Short: "Every row inserted, updated or deleted in a destination's table between two snapshots",
		Long: `Every row inserted, updated or deleted in a destination's table between snapshot V1 and
snapshot V2 (default: the latest published), in primary-key order: exactly the difference of
'sluice read --snapshot V1' and 'sluice read --snapshot V2'. Both snapshots must be retained.

--format jsonl (the default) prints one JSON object per change:
  {"op":"insert|update|delete","position":"LSN:seq","key":{...},"row":{...},"old":{...}}
row is the row at V2 (insert, update) as 'sluice read' prints it, old the row at V1 (update,
delete), position the source position of the key's change at V2 (for a delete its tombstone,
or the clear that removed it; absent when unknown). --format arrow or parquet writes one file
to stdout: a row per change, the columns _sluice_change (the op) and _sluice_position, then the
table's columns (the row at V2, or for a delete the row at V1).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			q, err := target.query()
			if err != nil {
				return err
			}
			if err := proto.ValidateTable(table); err != nil {
				return &exitError{2, err}
			}
			f, err := export.ParseFormat(format)
			if err != nil || f == export.CSV {
				return &exitError{2, fmt.Errorf("--format %q: want jsonl, arrow or parquet", format)}
			}
			if from == 0 || (to != 0 && from > to) {
				return &exitError{2, fmt.Errorf("--from must be a snapshot version at or before --to")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			q.Set("table", table)
			q.Set("from", strconv.FormatUint(from, 10))
			q.Set("limit", strconv.Itoa(pageSize))
			if to != 0 {
				q.Set("to", strconv.FormatUint(to, 10))
			}
			next := func(ctx context.Context, after string) (api.ChangesPage, error) {
				if after != "" {
					q.Set("after", after)
				}
				var p api.ChangesPage
				if err := c.get(ctx, "/api/v1/changes", q, &p); err != nil {
					return p, err
				}
				// Every page after the first is pinned to the first page's to.
				q.Set("to", strconv.FormatUint(p.To, 10))
				return p, nil
			}
			first, err := next(ctx, "")
			if err != nil {
				return err
			}
			if f == export.JSONL {
				return writeChangesJSONL(ctx, first, next)
			}
			cols := []export.Column{{Name: changeOpColumn, Kind: proto.KindText}, {Name: changePosColumn, Kind: proto.KindText}}
			for _, col := range first.Columns {
				cols = append(cols, export.Column{Name: col.Name, Kind: col.Kind})
			}
			w := bufio.NewWriterSize(os.Stdout, 256<<10)
			_, err = export.Write(ctx, w, f, cols, func(ctx context.Context, after string) (export.Page, error) {
				p := first
				if after != "" {
					var err error
					if p, err = next(ctx, after); err != nil {
						return export.Page{}, err
					}
				}
				rows := make([]json.RawMessage, 0, len(p.Changes))
				for _, ch := range p.Changes {
					rows = append(rows, flatChange(ch))
				}
				return export.Page{Rows: rows, Next: p.Next}, nil
			}, nil)
			if err != nil {
				return err
			}
			return w.Flush()
		},
	}
	target = addTargetFlags(cmd, true, "read the changes of")
	cmd.Flags().StringVar(&table, "table", "", "source table, schema.table")
	cmd.Flags().Uint64Var(&from, "from", 0, "the earlier snapshot version")
	cmd.Flags().Uint64Var(&to, "to", 0, "the later snapshot version (default: the latest published)")
	cmd.Flags().StringVar(&format, "format", "jsonl", "jsonl, arrow or parquet")
	cmd.Flags().IntVar(&pageSize, "page-size", 5000, "keys compared per API page")
	_ = cmd.MarkFlagRequired("table")
	_ = cmd.MarkFlagRequired("from")
	return cmd
}

// writeChangesJSONL prints every change of first and the pages after it,
// one JSON object a line.
func writeChangesJSONL(ctx context.Context, first api.ChangesPage, next func(context.Context, string) (api.ChangesPage, error)) error {
	w := bufio.NewWriterSize(os.Stdout, 256<<10)
	enc := json.NewEncoder(w)
	p := first
	for {
		for _, ch := range p.Changes {
			if err := enc.Encode(ch); err != nil {
				return err
			}
		}
		if p.Next == "" {
			return w.Flush()
		}
		var err error
		if p, err = next(ctx, p.Next); err != nil {
			_ = w.Flush()
			return err
		}
	}
}

// flatChange is a change as one row of the table's columns (the row at To,
// or a delete's old row) after its op and position.
func flatChange(ch catalog.Change) json.RawMessage {
	row := ch.Row
	if ch.Op == catalog.ChangeDelete {
		row = ch.Old
	}
	op, _ := json.Marshal(ch.Op)
	b := append([]byte(`{"`+changeOpColumn+`":`), op...)
	if ch.Position != "" {
		pos, _ := json.Marshal(ch.Position)
		b = append(append(b, `,"`+changePosColumn+`":`...), pos...)
	}
	if len(row) > 2 { // an object with at least one field: {"...":...}
		b = append(append(b, ','), row[1:]...)
	} else {
		b = append(b, '}')
	}
	return b
}
