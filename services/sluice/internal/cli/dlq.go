package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/natsx"
)

// dlqOps is what the dlq commands need: *api.DLQ (straight to NATS) and
// *dlqHTTP (through a running process's API) both have it.
type dlqOps interface {
	List(ctx context.Context, stage string, limit int) ([]api.DLQEntry, error)
	Show(ctx context.Context, seq uint64) (api.DLQEntry, error)
	Replay(ctx context.Context, seq uint64) (api.ReplayResult, error)
	ReplayAll(ctx context.Context, stage string) ([]api.ReplayResult, error)
	Purge(ctx context.Context, stage string, seq uint64) (api.PurgeResult, error)
}

type dlqFlags struct {
	direct bool
}

// ops opens the dead-letter operations: the HTTP API of the running
// pipeline by default, NATS itself with --nats.
func (f *dlqFlags) ops(ctx context.Context, g *globalFlags) (dlqOps, func(), error) {
	if !f.direct {
		c, err := g.client()
		if err != nil {
			return nil, nil, err
		}
		return &dlqHTTP{c: c}, func() {}, nil
	}
	cfg, err := g.loadConfig(true)
	if err != nil {
		return nil, nil, &exitError{2, err}
	}
	if cfg.NATS.URL == "embedded" {
		return nil, nil, &exitError{2, errors.New("nats.url is embedded: that NATS server lives inside the running `sluice dev` process and only it can reach it; drop --nats to go through its HTTP API (--server)")}
	}
	nc, js, err := natsx.Connect(ctx, cfg.NATS, "", "sluice-dlq")
	if err != nil {
		return nil, nil, err
	}
	return api.NewDLQ(js), func() { nc.Close() }, nil
}

func newDLQCmd(g *globalFlags) *cobra.Command {
	f := &dlqFlags{}
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Dead letters: list, show, replay, purge",
		Long: `Dead letters are messages a stage could not handle for a reason retrying cannot fix
(a bad wire version, an undecodable body, unroutable rows, a corrupt pack). They are kept on
the DLQ stream (subjects sluice.dlq.<stage>) with the reason, and never block other messages.

By default these commands go through the HTTP API of the running pipeline (--server, default
http.listen), which works with an embedded NATS too; --nats talks to nats.url directly.`,
	}
	cmd.PersistentFlags().BoolVar(&f.direct, "nats", false, "connect to nats.url directly instead of the running pipeline's HTTP API")
	cmd.AddCommand(newDLQListCmd(g, f), newDLQShowCmd(g, f), newDLQReplayCmd(g, f), newDLQPurgeCmd(g, f))
	return cmd
}

func newDLQListCmd(g *globalFlags, f *dlqFlags) *cobra.Command {
	var stage string
	var limit int
	var asJSON, wide bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Dead letters, oldest first: sequence, stage, time, original subject, reason",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ops, done, err := f.ops(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer done()
			entries, err := ops.List(cmd.Context(), stage, limit)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(entries)
			}
			return printDLQList(os.Stdout, entries, wide)
		},
	}
	cmd.Flags().StringVar(&stage, "stage", "", "only this stage (reader, router, flusher, indexer, publisher)")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the entries as JSON")
	cmd.Flags().BoolVar(&wide, "wide", false, "do not shorten reasons")
	return cmd
}

func printDLQList(w io.Writer, entries []api.DLQEntry, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tSTAGE\tTIME\tORIG_SUBJECT\tREASON")
	for _, e := range entries {
		reason := strings.NewReplacer("\t", " ", "\n", " ").Replace(e.Reason)
		if !wide && len(reason) > 100 {
			reason = reason[:97] + "..."
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.Seq, e.Stage, e.Time.UTC().Format(time.RFC3339), dash(e.OrigSubject), reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(entries) == 0 {
		_, err := fmt.Fprintln(w, "(no dead letters)")
		return err
	}
	return nil
}

func parseSeq(s string) (uint64, error) {
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seq == 0 {
		return 0, &exitError{2, fmt.Errorf("sequence %q: want a positive number (see `sluice dlq list`)", s)}
	}
	return seq, nil
}

func newDLQShowCmd(g *globalFlags, f *dlqFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show SEQ",
		Short: "One dead letter: its headers and a summary of its Arrow body (schema, rows)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := parseSeq(args[0])
			if err != nil {
				return err
			}
			ops, done, err := f.ops(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer done()
			e, err := ops.Show(cmd.Context(), seq)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(e)
			}
			return printDLQEntry(os.Stdout, e)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the entry as JSON")
	return cmd
}

func printDLQEntry(w io.Writer, e api.DLQEntry) error {
	fmt.Fprintf(w, "seq:           %d\n", e.Seq)
	fmt.Fprintf(w, "stage:         %s\n", e.Stage)
	fmt.Fprintf(w, "time:          %s\n", e.Time.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "reason:        %s\n", e.Reason)
	fmt.Fprintf(w, "original:      %s (stream %s, seq %d)\n", dash(e.OrigSubject), dash(e.OrigStream), e.OrigSeq)
	fmt.Fprintf(w, "body:          %d bytes\n", e.Bytes)
	if e.BodyOmitted > 0 {
		fmt.Fprintf(w, "               (the original %d-byte body did not fit; it is read from the original stream)\n", e.BodyOmitted)
	}
	keys := make([]string, 0, len(e.Headers))
	for k := range e.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintln(w, "headers:")
	for _, k := range keys {
		for _, v := range e.Headers[k] {
			fmt.Fprintf(w, "  %s: %s\n", k, v)
		}
	}
	if b := e.Body; b != nil {
		if b.Error != "" {
			fmt.Fprintf(w, "arrow body:    not decodable: %s\n", b.Error)
		} else {
			fmt.Fprintf(w, "arrow body:    %d rows, %d columns\n", b.Rows, len(b.Fields))
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "  COLUMN\tARROW TYPE\tNULLABLE\tKIND\tPG TYPE")
			for _, fs := range b.Fields {
				fmt.Fprintf(tw, "  %s\t%s\t%t\t%s\t%s\n", fs.Name, fs.Type, fs.Nullable, dash(fs.Kind), dash(fs.PgType))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			mk := make([]string, 0, len(b.Metadata))
			for k := range b.Metadata {
				mk = append(mk, k)
			}
			sort.Strings(mk)
			for _, k := range mk {
				fmt.Fprintf(w, "  schema %s = %s\n", k, b.Metadata[k])
			}
		}
	}
	return nil
}

func newDLQReplayCmd(g *globalFlags, f *dlqFlags) *cobra.Command {
	var all, asJSON bool
	var stage string
	cmd := &cobra.Command{
		Use:   "replay SEQ | --all [--stage S]",
		Short: "Republish dead letters to their original subjects (Nats-Msg-Id replay:<seq>), then delete them",
		Long: `Republishes a dead letter's body with its original headers to its original subject, with
Nats-Msg-Id "replay:<dlq seq>" (so a repeated replay inside the stream's duplicate window is
stored once), then deletes it from the DLQ. Replay after fixing the cause: a message that
fails again is dead-lettered again. Apply is idempotent by position, so a replay can never
corrupt a destination.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) == 1) {
				return &exitError{2, errors.New("give either a sequence or --all")}
			}
			if stage != "" && !all {
				return &exitError{2, errors.New("--stage goes with --all")}
			}
			ops, done, err := f.ops(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer done()
			var results []api.ReplayResult
			if all {
				results, err = ops.ReplayAll(cmd.Context(), stage)
				if err != nil {
					return err
				}
			} else {
				seq, perr := parseSeq(args[0])
				if perr != nil {
					return perr
				}
				r, err := ops.Replay(cmd.Context(), seq)
				if err != nil {
					return err
				}
				results = []api.ReplayResult{r}
			}
			if asJSON {
				if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
					return err
				}
			}
			failed := 0
			for _, r := range results {
				if r.Error != "" {
					failed++
				}
				if asJSON {
					continue
				}
				switch {
				case r.Error != "":
					fmt.Fprintf(os.Stdout, "%d: not replayed: %s\n", r.Seq, r.Error)
				case r.Duplicate:
					fmt.Fprintf(os.Stdout, "%d: already replayed to %s (%s/%d); removed from the DLQ\n", r.Seq, r.Subject, r.Stream, r.NewSeq)
				default:
					fmt.Fprintf(os.Stdout, "%d: replayed to %s (%s/%d)\n", r.Seq, r.Subject, r.Stream, r.NewSeq)
				}
			}
			if !asJSON {
				fmt.Fprintf(os.Stdout, "%d replayed, %d not\n", len(results)-failed, failed)
			}
			if failed > 0 {
				return &exitError{1, fmt.Errorf("%d dead letter(s) could not be replayed", failed)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "replay every dead letter (of --stage)")
	cmd.Flags().StringVar(&stage, "stage", "", "with --all: only this stage")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON")
	return cmd
}

func newDLQPurgeCmd(g *globalFlags, f *dlqFlags) *cobra.Command {
	var stage string
	var seq uint64
	var all bool
	cmd := &cobra.Command{
		Use:   "purge --seq N | --stage S | --all",
		Short: "Delete dead letters without replaying them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if seq == 0 && stage == "" && !all {
				return &exitError{2, errors.New("say what to purge: --seq N, --stage S, or --all")}
			}
			if all && (seq != 0 || stage != "") {
				return &exitError{2, errors.New("--all goes alone")}
			}
			ops, done, err := f.ops(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer done()
			r, err := ops.Purge(cmd.Context(), stage, seq)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stdout, "purged %d dead letter(s)\n", r.Purged)
			return nil
		},
	}
	cmd.Flags().StringVar(&stage, "stage", "", "purge this stage's dead letters (with --seq: check the entry is from it)")
	cmd.Flags().Uint64Var(&seq, "seq", 0, "purge only this dead letter")
	cmd.Flags().BoolVar(&all, "all", false, "purge every dead letter")
	return cmd
}

// dlqHTTP runs the dlq operations on a running process's API.
type dlqHTTP struct{ c *client }

func (h *dlqHTTP) List(ctx context.Context, stage string, limit int) ([]api.DLQEntry, error) {
	q := url.Values{}
	if stage != "" {
		q.Set("stage", stage)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out []api.DLQEntry
	return out, h.c.dlqGet(ctx, "/api/v1/dlq", q, &out)
}

func (h *dlqHTTP) Show(ctx context.Context, seq uint64) (api.DLQEntry, error) {
	var out api.DLQEntry
	return out, h.c.dlqGet(ctx, "/api/v1/dlq/"+strconv.FormatUint(seq, 10), nil, &out)
}

func (h *dlqHTTP) Replay(ctx context.Context, seq uint64) (api.ReplayResult, error) {
	var out api.ReplayResult
	return out, h.c.send(ctx, http.MethodPost, "/api/v1/dlq/"+strconv.FormatUint(seq, 10)+"/replay", nil, &out)
}

func (h *dlqHTTP) ReplayAll(ctx context.Context, stage string) ([]api.ReplayResult, error) {
	q := url.Values{}
	if stage != "" {
		q.Set("stage", stage)
	}
	var out []api.ReplayResult
	return out, h.c.send(ctx, http.MethodPost, "/api/v1/dlq/replay", q, &out)
}

func (h *dlqHTTP) Purge(ctx context.Context, stage string, seq uint64) (api.PurgeResult, error) {
	q := url.Values{}
	if stage != "" {
		q.Set("stage", stage)
	}
	var out api.PurgeResult
	if seq > 0 {
		return out, h.c.send(ctx, http.MethodDelete, "/api/v1/dlq/"+strconv.FormatUint(seq, 10), q, &out)
	}
	return out, h.c.send(ctx, http.MethodPost, "/api/v1/dlq/purge", q, &out)
}

// dlqGet is client.get with a hint when the server has no DLQ endpoints.
func (c *client) dlqGet(ctx context.Context, path string, q url.Values, out any) error {
	return dlqHint(c.get(ctx, path, q, out))
}

func dlqHint(err error) error {
	var ae *apiError
	if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusMethodNotAllowed) && strings.Contains(ae.Msg, "404 page not found") {
		return fmt.Errorf("%w (this server has no dead-letter API; with a nats:// nats.url use --nats)", err)
	}
	return err
}

// send is client.do without a body, with the dead-letter API's hint.
func (c *client) send(ctx context.Context, method, path string, q url.Values, out any) error {
	return dlqHint(c.do(ctx, method, path, q, nil, out))
}
