package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/services/sluice/internal/export"
)

func newStatusCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Per destination state, cursor and lag; the latest snapshot; JetStream lag",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var raw []byte
			if err := c.get(cmd.Context(), "/api/v1/status", nil, &raw); err != nil {
				return err
			}
			if asJSON {
				_, err := os.Stdout.Write(append(bytes.TrimSpace(raw), '\n'))
				return err
			}
			return printStatus(os.Stdout, raw)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

func newWaitCmd(g *globalFlags) *cobra.Command {
	var through string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait --through-lsn LSN",
		Short: "Block until the latest published snapshot includes every change at or below LSN",
		Long: `Block until the latest published snapshot includes every change at or below LSN
for every destination, then exit 0. Exit 1 on timeout; exit 2, with the reason on
stderr, when a halted table or destination holds a change at or below LSN (a halt
whose first held change is at an unknown position counts as holding one), so that
no snapshot will include it until an operator acts. A pack or segment the indexer
dead-lettered (corrupt) halts its destinations from its first position, until the
dead letter is replayed or a resync of its table done after it is published. A
resync that carries rows the stream does not (a schema change rewrote them without
WAL, or the table was added to source.tables) holds the wait, whatever the LSN,
until it is done and published.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			target, err := proto.ParseLSN(through)
			if err != nil {
				return &exitError{2, err}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			last := ""
			for {
				// The snapshot first, then the halts: a halt is recorded
				// before the reader streams past it, so a snapshot through
				// a halted change is never read with the halt still unseen.
				var s api.Snapshot
				err := c.get(ctx, "/api/v1/snapshots/latest", nil, &s)
				var ae *apiError
				done := false
				switch {
				case err == nil:
					got, perr := proto.ParseLSN(s.ThroughLSN)
					done = perr == nil && got >= target
					last = fmt.Sprintf("latest snapshot %d is through %s", s.Version, s.ThroughLSN)
				case errors.As(err, &ae) && ae.Status == 404:
					last = "no snapshot published yet"
				case ctx.Err() != nil:
				default:
					last = err.Error()
				}
				if ctx.Err() == nil {
					held, herr := heldAtOrBelow(ctx, c, target)
					switch {
					case herr != nil && ctx.Err() == nil:
						// Whether a halt holds a change is unknown: never
						// say yes on that.
						done, last = false, herr.Error()
					case len(held) > 0:
						return &exitError{2, fmt.Errorf("no snapshot will include every change through %s until an operator acts:\n  %s", target, strings.Join(held, "\n  "))}
					}
					if done {
						if why := recoveringAtOrBelow(ctx, c, target, s.ThroughLSN); why != "" {
							done, last = false, why
						}
					}
				}
				if done {
					fmt.Fprintf(os.Stderr, "snapshot %d includes everything through %s (through_lsn %s)\n", s.Version, target, s.ThroughLSN)
					for _, w := range attention(ctx, c) {
						fmt.Fprintln(os.Stderr, "warning: "+w)
					}
					return nil
				}
				select {
				case <-ctx.Done():
					if cmd.Context().Err() != nil {
						return &exitError{130, errors.New("interrupted")}
					}
					return &exitError{1, fmt.Errorf("timed out after %s waiting for %s: %s", timeout, target, last)}
				case <-time.After(200 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().StringVar(&through, "through-lsn", "", "source LSN in Postgres text form, e.g. 0/16B3748")
	cmd.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "give up after this long (exit 1)")
	_ = cmd.MarkFlagRequired("through-lsn")
	return cmd
}

func newReadCmd(g *globalFlags) *cobra.Command {
	var table, format string
	var snapshot int64
	var system bool
	var pageSize int
	var target *targetFlags
	cmd := &cobra.Command{
		Use:   "read (--destination D | --value V) --table SCHEMA.TABLE",
		Short: "A destination's copy of a table as of a snapshot, ordered by primary key",
		Long: `A destination's copy of a table as of a snapshot, ordered by primary key.
Name the destination by its name (--destination, canonical form only) or by a tenant's own
routing value (--value, named as the router names it); neither is ever taken for the other.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := target.query()
			if err != nil {
				return err
			}
			if err := proto.ValidateTable(table); err != nil {
				return &exitError{2, err}
			}
			var out rowWriter
			switch format {
			case "jsonl":
				out = &jsonlWriter{w: bufio.NewWriter(os.Stdout)}
			case "csv":
				out = &csvWriter{w: csv.NewWriter(os.Stdout)}
			case "table":
				out = &tableWriter{w: tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)}
			default:
				return &exitError{2, fmt.Errorf("--format %q: want jsonl, csv or table", format)}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			q.Set("table", table)
			q.Set("limit", strconv.Itoa(pageSize))
			if snapshot >= 0 {
				q.Set("snapshot", strconv.FormatInt(snapshot, 10))
			}
			if system {
				q.Set("system_columns", "true")
			}
			for {
				var page api.RowsPage
				if err := c.get(cmd.Context(), "/api/v1/rows", q, &page); err != nil {
					return err
				}
				// Every page after the first is pinned to the first page's snapshot.
				q.Set("snapshot", strconv.FormatUint(page.Snapshot, 10))
				for _, r := range page.Rows {
					if err := out.row(r); err != nil {
						return err
					}
				}
				if page.Next == "" {
					return out.close()
				}
				q.Set("after", page.Next)
			}
		},
	}
	target = addTargetFlags(cmd, true, "read")
	cmd.Flags().StringVar(&table, "table", "", "source table, schema.table")
	cmd.Flags().Int64Var(&snapshot, "snapshot", -1, "snapshot version (default: the latest published)")
	cmd.Flags().StringVar(&format, "format", "jsonl", "jsonl, csv or table")
	cmd.Flags().BoolVar(&system, "system-columns", false, "include the _sluice_* system columns")
	cmd.Flags().IntVar(&pageSize, "page-size", 5000, "rows per API page")
	_ = cmd.MarkFlagRequired("table")
	return cmd
}

type rowWriter interface {
	row(json.RawMessage) error
	close() error
}

type jsonlWriter struct{ w *bufio.Writer }

func (j *jsonlWriter) row(r json.RawMessage) error {
	j.w.Write(r)
	return j.w.WriteByte('\n')
}
func (j *jsonlWriter) close() error { return j.w.Flush() }

type csvWriter struct {
	w      *csv.Writer
	header bool
}

func (c *csvWriter) row(r json.RawMessage) error {
	keys, vals, err := export.CSVCells(r)
	if err != nil {
		return err
	}
	if !c.header {
		c.header = true
		if err := c.w.Write(keys); err != nil {
			return err
		}
	}
	return c.w.Write(vals)
}
func (c *csvWriter) close() error { c.w.Flush(); return c.w.Error() }

type tableWriter struct {
	w      *tabwriter.Writer
	header bool
}

func (t *tableWriter) row(r json.RawMessage) error {
	keys, vals, err := export.OrderedCells(r)
	if err != nil {
		return err
	}
	if !t.header {
		t.header = true
		fmt.Fprintln(t.w, strings.ToUpper(strings.Join(keys, "\t")))
	}
	for i, v := range vals {
		if len(v) > 60 {
			vals[i] = v[:57] + "..."
		}
		vals[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(vals[i])
	}
	_, err = fmt.Fprintln(t.w, strings.Join(vals, "\t"))
	return err
}
func (t *tableWriter) close() error { return t.w.Flush() }

// printStatus renders the status JSON for a person: the latest snapshot,
// halted tables, one line per destination, one per stream consumer, then
// every other service field as indented JSON (the whole document is
// `sluice status --json`).
func printStatus(w io.Writer, raw []byte) error {
	var st struct {
		Services    map[string]json.RawMessage `json:"services"`
		Snapshot    *api.Snapshot              `json:"snapshot"`
		Streams     []api.StreamStatus         `json:"streams"`
		HaltedPacks []api.PackHalt             `json:"halted_packs"`
		HaltsError  string                     `json:"halts_error"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("decoding status: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if s := st.Snapshot; s != nil {
		fmt.Fprintf(tw, "snapshot %d\tpublished %s\tthrough_lsn %s\tpacks %d\n", s.Version, s.PublishedAt.Format(time.RFC3339), s.ThroughLSN, s.Packs)
	} else {
		fmt.Fprintln(tw, "no snapshot published yet")
	}
	type copyProgress struct {
		ID         int64         `json:"id"`
		Rows       int64         `json:"rows"`
		Estimated  int64         `json:"estimated_rows"`
		RowsPerSec float64       `json:"rows_per_sec"`
		ETA        time.Duration `json:"eta_ns"`
		Done       bool          `json:"done"`
		Chunks     int64         `json:"chunks"`
	}
	var reader struct {
		State    string                  `json:"state"`
		Halted   map[string]string       `json:"halted_tables"`
		Backfill map[string]copyProgress `json:"backfill"`
		Resyncs  map[string]copyProgress `json:"resyncs"`
		Failover *struct {
			Possible bool     `json:"possible"`
			Why      []string `json:"why"`
			Unknown  string   `json:"unknown"`
		} `json:"failover"`
		SlotLost *struct {
			At  time.Time `json:"at"`
			Why string    `json:"why"`
		} `json:"slot_lost"`
		Standby *struct {
			Primary    string   `json:"primary"`
			ReplayLSN  string   `json:"replay_lsn"`
			LagBytes   int64    `json:"lag_bytes"`
			LagSeconds *float64 `json:"lag_seconds"`
			Error      string   `json:"error"`
		} `json:"standby"`
	}
	if r, ok := st.Services["reader"]; ok && json.Unmarshal(r, &reader) == nil {
		fmt.Fprintf(tw, "reader\t%s\n", reader.State)
		if sb := reader.Standby; sb != nil {
			fmt.Fprintf(tw, "  decoding from a standby\twrites to the primary %s; replayed %s, %s behind it", sb.Primary, sb.ReplayLSN, formatBytes(sb.LagBytes))
			if sb.LagSeconds != nil {
				fmt.Fprintf(tw, ", last transaction replayed %s ago", time.Duration(*sb.LagSeconds*float64(time.Second)).Round(time.Millisecond))
			}
			fmt.Fprintln(tw)
			if sb.Error != "" {
				fmt.Fprintf(tw, "    %s\n", sb.Error)
			}
		}
		if f := reader.Failover; f != nil {
			verdict := "not possible (a promoted standby has no copy of the slot: every table would be copied again)"
			if f.Possible {
				verdict = "possible (a promoted standby resumes on its copy of the slot)"
			}
			fmt.Fprintf(tw, "  failover\t%s\n", verdict)
			for _, w := range f.Why {
				fmt.Fprintf(tw, "    %s\n", w)
			}
		}
		if l := reader.SlotLost; l != nil {
			fmt.Fprintf(tw, "  slot lost at %s, every table copied again\t%s\n", l.At.Format(time.RFC3339), l.Why)
		}
		// Copies, in the form sluice resync --wait prints them.
		for _, c := range []struct {
			kind string
			m    map[string]copyProgress
		}{{"backfill", reader.Backfill}, {"resync", reader.Resyncs}} {
			for _, t := range slices.Sorted(maps.Keys(c.m)) {
				p := c.m[t]
				state := "running"
				if p.Done {
					state = "done"
				}
				line := fmt.Sprintf("  %s %s\t%s, %s", c.kind, t, state, rowsOfEstimate(p.Rows, p.Estimated))
				if p.Chunks > 0 {
					line += fmt.Sprintf(", %d chunks", p.Chunks)
				}
				if !p.Done {
					line += fmt.Sprintf(", %.0f rows/s, eta %s", p.RowsPerSec, p.ETA.Round(time.Second))
				}
				fmt.Fprintln(tw, line)
			}
		}
		for _, t := range slices.Sorted(maps.Keys(reader.Halted)) {
			fmt.Fprintf(tw, "  halted table %s\t%s\n", t, reader.Halted[t])
			fmt.Fprintf(tw, "    to recover it, run:\tsluice resync --table %s\n", t)
		}
	}
	for _, h := range st.HaltedPacks {
		if h.RecoveringEndLSN != "" {
			fmt.Fprintf(tw, "corrupt pack %s\tdead letter %d, resynced: in snapshots through %s\n", orUnknown(h.PackPath), h.DLQSeq, h.RecoveringEndLSN)
			continue
		}
		fmt.Fprintf(tw, "halted by a corrupt pack: %s\n", packHaltLine(h))
		for _, r := range h.Recover {
			fmt.Fprintf(tw, "    to recover it, run:\t%s\n", r)
		}
	}
	if st.HaltsError != "" {
		fmt.Fprintf(tw, "halts of dead-lettered packs unknown: %s\n", st.HaltsError)
	}
	var flusher struct {
		Destinations []struct {
			Destination  string  `json:"destination"`
			Partition    int     `json:"partition"`
			State        string  `json:"state"`
			BufferedRows int64   `json:"buffered_rows"`
			Cursor       string  `json:"cursor"`
			LastPack     string  `json:"last_pack"`
			LastError    string  `json:"last_error"`
			AgeSeconds   float64 `json:"age_seconds"`
			HeldMessages int     `json:"held_messages"`
		} `json:"destinations"`
	}
	if f, ok := st.Services["flusher"]; ok && json.Unmarshal(f, &flusher) == nil && len(flusher.Destinations) > 0 {
		fmt.Fprintln(tw, "\nDESTINATION\tPARTITION\tSTATE\tBUFFERED ROWS\tCURSOR\tLAST PACK\tLAG\tERROR")
		for _, d := range flusher.Destinations {
			name := d.Destination
			if v, err := proto.DecodeDestination(name); err == nil && v != name {
				name += " (" + v + ")"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%.1fs\t%s\n", name, d.Partition, d.State, d.BufferedRows, d.Cursor, d.LastPack, d.AgeSeconds, d.LastError)
		}
	}
	if len(st.Streams) > 0 {
		fmt.Fprintln(tw, "\nSTREAM\tMESSAGES\tBYTES\tCONSUMER\tPENDING\tACK PENDING\tREDELIVERED")
		for _, s := range st.Streams {
			if s.Error != "" {
				fmt.Fprintf(tw, "%s\t%s\t\t\t\t\t\n", s.Name, s.Error)
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t\t\t\t\n", s.Name, s.Messages, s.Bytes)
			for _, c := range s.Consumers {
				fmt.Fprintf(tw, "\t\t\t%s\t%d\t%d\t%d\n", c.Name, c.Pending, c.AckPending, c.Redelivered)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, name := range slices.Sorted(maps.Keys(st.Services)) {
		var m map[string]json.RawMessage
		if json.Unmarshal(st.Services[name], &m) != nil {
			continue
		}
		delete(m, "destinations") // the table above
		b, err := json.Marshal(m)
		if err != nil {
			continue
		}
		fmt.Fprintf(w, "%s: %s\n", name, b)
	}
	return nil
}

// attention lists what the snapshot a wait returned on leaves out, as the
// status of the process at --server shows it: halted tables (their changes
// after the halt are in no snapshot), halted destinations, dead letters.
// Errors reading the status leave the list empty: the wait itself succeeded.
// heldAtOrBelow returns, one line each, the halted tables and destinations
// that hold a change at or below target, so that no snapshot will include
// it until an operator acts: a table halted at or below target (the
// reader's halted_at_lsn: its first change not carried), or halted at an
// unknown position (counted as holding one: a dropped table); a halted
// destination whose cursor is below target (its changes after the cursor
// are not flushed; whether one is at or below target is unknown, so it
// counts as holding one).
// haltsView asks GET /api/v1/status for what a halt check reads: the
// services' summaries (halted destinations only), no snapshot or streams.
// A server without views answers the full status, which holds the same.
var haltsView = url.Values{"view": {"halts"}}

func heldAtOrBelow(ctx context.Context, c *client, target proto.LSN) ([]string, error) {
	var st struct {
		Services struct {
			Reader struct {
				Halted   map[string]string `json:"halted_tables"`
				HaltedAt map[string]string `json:"halted_at_lsn"`
			} `json:"reader"`
			Flusher struct {
				Destinations []struct {
					Destination string `json:"destination"`
					State       string `json:"state"`
					Cursor      string `json:"cursor"`
					LastError   string `json:"last_error"`
				} `json:"destinations"`
			} `json:"flusher"`
		} `json:"services"`
		HaltedPacks []api.PackHalt `json:"halted_packs"`
		HaltsError  string         `json:"halts_error"`
	}
	if err := c.get(ctx, "/api/v1/status", haltsView, &st); err != nil {
		return nil, fmt.Errorf("reading the halted tables and destinations: %w", err)
	}
	if st.HaltsError != "" {
		return nil, fmt.Errorf("reading the halts of dead-lettered packs: %s", st.HaltsError)
	}
	var out []string
	r := st.Services.Reader
	for _, t := range slices.Sorted(maps.Keys(r.Halted)) {
		at, err := proto.ParseLSN(r.HaltedAt[t])
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("table %s is halted at an unknown position, so it may hold a change at or below %s: %s", t, target, r.Halted[t]))
		case at <= target:
			out = append(out, fmt.Sprintf("table %s is halted: its changes from %s on are in no snapshot: %s (recover it: sluice resync --table %s)", t, at, r.Halted[t], t))
		}
	}
	through := proto.Position{LSN: target, Seq: math.MaxUint64}
	for _, d := range st.Services.Flusher.Destinations {
		if d.State != "halted" {
			continue
		}
		cur, err := proto.ParsePosition(d.Cursor)
		if err == nil && cur.Compare(through) >= 0 {
			continue // everything of it through target is in packs
		}
		out = append(out, fmt.Sprintf("destination %s is halted with its cursor at %q, below %s: its later changes are in no snapshot: %s", d.Destination, d.Cursor, target, d.LastError))
	}
	for _, h := range st.HaltedPacks {
		if h.RecoveringEndLSN != "" {
			continue // cured by resyncs: recoveringAtOrBelow
		}
		if first, err := proto.ParsePosition(h.FirstPosition); err == nil && first.LSN > target {
			continue
		}
		out = append(out, packHaltLine(h))
	}
	return out, nil
}

// packHaltLine is one dead-lettered pack's halt, as `sluice wait` and
// `sluice status` print it (docs/adr/0034-corrupt-pack-halts.md).
func packHaltLine(h api.PackHalt) string {
	from := "an unknown position"
	if h.FirstPosition != "" {
		from = h.FirstPosition
	}
	what := "table " + h.Table
	if h.Table == "" {
		what = "an unknown table"
	}
	return fmt.Sprintf("%s is halted for %s: pack %s (positions %s to %s) was dead-lettered (dlq %d), its changes from %s on are in no snapshot: %s (recover: %s)",
		what, h.Listed(), orUnknown(h.PackPath), orUnknown(h.FirstPosition), orUnknown(h.LastPosition), h.DLQSeq, from, h.Reason, strings.Join(h.Recover, "; or "))
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// recoveringAtOrBelow says why a snapshot through through is not yet
// through target ("" when none): a table whose halt at or below target a
// resync cleared has the changes the halt dropped only in snapshots through
// the resync's end; a table with rows only a resync carries (a schema
// change rewrote them without WAL, or it was added to source.tables: the
// reader's resync_holds) has them in no snapshot until that resync is done
// and a snapshot is through its end, whatever the target (the schema
// change's own position is not in the stream); and a streaming reader whose
// periodic schema check has not yet looked past target may still find one.
func recoveringAtOrBelow(ctx context.Context, c *client, target proto.LSN, through string) string {
	var st struct {
		Services struct {
			Reader struct {
				Recovered map[string]struct {
					HaltedAt string `json:"halted_at_lsn"`
					EndLSN   string `json:"end_lsn"`
				} `json:"recovered_halts"`
				Holds map[string]struct {
					ResyncID int64  `json:"resync_id"`
					Reason   string `json:"reason"`
					EndLSN   string `json:"end_lsn"`
					Error    string `json:"error"`
				} `json:"resync_holds"`
				State         string `json:"state"`
				SchemaChecked string `json:"schema_checked_lsn"`
			} `json:"reader"`
		} `json:"services"`
		HaltedPacks []api.PackHalt `json:"halted_packs"`
	}
	if err := c.get(ctx, "/api/v1/status", haltsView, &st); err != nil {
		return err.Error()
	}
	got, err := proto.ParseLSN(through)
	if err != nil {
		return err.Error()
	}
	for _, t := range slices.Sorted(maps.Keys(st.Services.Reader.Recovered)) {
		rh := st.Services.Reader.Recovered[t]
		at, err1 := proto.ParseLSN(rh.HaltedAt)
		end, err2 := proto.ParseLSN(rh.EndLSN)
		if err1 == nil && err2 == nil && at <= target && got < end {
			return fmt.Sprintf("table %s was halted at %s and resynced: its changes from there are in snapshots through %s, the latest is through %s", t, at, end, through)
		}
	}
	// A schema change that no later row change brings to the stream is
	// seen by the reader's periodic schema check only (every second): one
	// committed at or below target is in the holds once a check that began
	// after target is through.
	if rd := st.Services.Reader; rd.State == "streaming" {
		checked, err := proto.ParseLSN(rd.SchemaChecked)
		if err != nil || checked < target {
			return fmt.Sprintf("the reader has not yet checked the source's schema through %s (checked through %q)", target, rd.SchemaChecked)
		}
	}
	for _, t := range slices.Sorted(maps.Keys(st.Services.Reader.Holds)) {
		h := st.Services.Reader.Holds[t]
		if h.Error != "" && h.EndLSN == "" {
			return fmt.Sprintf("table %s: resync %d (%s) failed, so rows the stream does not carry are in no snapshot: %s (recover: sluice resync --table %s)", t, h.ResyncID, h.Reason, h.Error, t)
		}
		if h.EndLSN == "" {
			return fmt.Sprintf("table %s is being resynced (resync %d, %s): rows the stream does not carry are in no snapshot until it is done", t, h.ResyncID, h.Reason)
		}
		if end, err := proto.ParseLSN(h.EndLSN); err == nil && got < end {
			return fmt.Sprintf("table %s was resynced (resync %d, %s): its rows are in snapshots through %s, the latest is through %s", t, h.ResyncID, h.Reason, end, through)
		}
	}
	for _, h := range st.HaltedPacks {
		end, err := proto.ParseLSN(h.RecoveringEndLSN)
		if err != nil || got >= end {
			continue
		}
		if first, err := proto.ParsePosition(h.FirstPosition); err == nil && first.LSN > target {
			continue
		}
		return fmt.Sprintf("table %s's dead-lettered pack %s was resynced: its changes are in snapshots through %s, the latest is through %s", h.Table, h.PackPath, end, through)
	}
	return ""
}

func attention(ctx context.Context, c *client) []string {
	var st struct {
		Services struct {
			Reader struct {
				Halted map[string]string `json:"halted_tables"`
			} `json:"reader"`
			Flusher struct {
				Destinations []struct {
					Destination string `json:"destination"`
					State       string `json:"state"`
					LastError   string `json:"last_error"`
				} `json:"destinations"`
			} `json:"flusher"`
		} `json:"services"`
		Streams     []api.StreamStatus `json:"streams"`
		HaltedPacks []api.PackHalt     `json:"halted_packs"`
	}
	if err := c.get(ctx, "/api/v1/status", nil, &st); err != nil {
		return nil
	}
	var out []string
	for _, h := range st.HaltedPacks {
		if h.RecoveringEndLSN == "" {
			out = append(out, packHaltLine(h))
		}
	}
	for _, t := range slices.Sorted(maps.Keys(st.Services.Reader.Halted)) {
		out = append(out, fmt.Sprintf("table %s is halted, its later changes are in no snapshot: %s", t, st.Services.Reader.Halted[t]))
	}
	for _, d := range st.Services.Flusher.Destinations {
		if d.State == "halted" || d.State == "error" {
			out = append(out, fmt.Sprintf("destination %s is %s: %s", d.Destination, d.State, d.LastError))
		}
	}
	for _, s := range st.Streams {
		if s.Error != "" {
			out = append(out, fmt.Sprintf("stream %s does not answer: %s", s.Name, s.Error))
		}
		if s.Name == proto.StreamDLQ && s.Messages > 0 {
			out = append(out, fmt.Sprintf("%d messages are in the dead-letter stream (sluice dlq list)", s.Messages))
		}
	}
	return out
}
