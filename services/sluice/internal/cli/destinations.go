package cli

// sluice destinations list|pause|resume|drain|retire: a destination's
// lifecycle, through the running pipeline's HTTP API (api/lifecycle.go).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/stack"
	"github.com/sluice-cdc/sluice/shared/state"
)

// destinationStates gives the API the lifecycle states: on the process's
// state pool, or, in a process without one (an indexer or publisher, e.g.
// compose's console), on a pool of its own that connects on first use
// (pgxpool connects lazily), so any process's API can pause a destination.
// The caller runs the returned close on shutdown.
// stateAPIs are the API's views of the state database (nil without one).
type stateAPIs struct {
	states  *state.DestinationStates
	resyncs *state.Resyncs
	halts   *state.HaltLedger
	tokens  *state.Tokens
}

func stateAPIsOn(pool *pgxpool.Pool, schema string) stateAPIs {
	return stateAPIs{state.NewDestinationStates(pool, schema), state.NewResyncs(pool, schema), state.NewHaltLedger(pool, schema), state.NewTokens(pool, schema)}
}

func destinationStates(ctx context.Context, st *stack.Stack) (stateAPIs, func()) {
	schema := st.Cfg.State.Schema
	if st.State != nil {
		return stateAPIsOn(st.State, schema), func() {}
	}
	pool, err := pgxpool.New(ctx, st.Cfg.StateDSN())
	if err != nil {
		st.Log.Warn("no state database for the destination lifecycle, resync and token API", "error", err)
		return stateAPIs{}, func() {}
	}
	return stateAPIsOn(pool, schema), pool.Close
}

// retireWarning says what retiring does; retire refuses without --yes
// when it cannot ask.
const retireWarning = `retiring %s is final: the router drops its rows and the flusher acks and discards its queued changes
from now on, so its copy stops at this point and can never be resumed (its packs and catalog rows are kept)`

func newDestinationsCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "destinations",
		Short: "List, pause, resume, drain, retire or purge destinations, live",
		Long: `Destination lifecycle, applied live by every router and flusher within destinations.state_poll (1s):
  pause    keep receiving and buffering its changes, never flush them (a full buffer is nak'd and redelivered later)
  resume   flush on the normal schedule again (from paused, draining or drained)
  drain    flush its buffer now, then hold like paused (state drained)
  retire   flush what is buffered once, then drop every later change for it; its packs are kept; final
  purge    erase a retired destination from every pack, segment and catalog table (--yes)
A paused or drained destination holds its partition's ack floor, so snapshots' through_lsn stops at its
oldest held change: its copy is not up to date, and no snapshot claims it is.`,
	}
	cmd.AddCommand(newDestinationsListCmd(g))
	cmd.AddCommand(newDestinationsPurgeCmd(g))
	for _, action := range []string{"pause", "resume", "drain", "retire"} {
		cmd.AddCommand(newDestinationActionCmd(g, action))
	}
	return cmd
}

func newDestinationsListCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	var only string
	var target *targetFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Every known destination: state (active included), cursor, last flush, what the flusher holds of it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if only != "" && !state.DestinationState(only).Valid() {
				return &exitError{2, fmt.Errorf("--state %q: want active, paused, draining, drained or retired", only)}
			}
			tq, err := target.query()
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			return listDestinations(cmd.Context(), c, tq, only, asJSON, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (one array)")
	cmd.Flags().StringVar(&only, "state", "", "only destinations in this state (active, paused, draining, drained, retired)")
	target = addTargetFlags(cmd, false, "only")
	return cmd
}

func newDestinationActionCmd(g *globalFlags, action string) *cobra.Command {
	var reason, value string
	var yes, ahead bool
	short := map[string]string{
		"pause":  "Pause a destination: keep buffering its changes, flush nothing",
		"resume": "Resume a paused, draining or drained destination",
		"drain":  "Flush a destination's buffer now, then hold it (drained)",
		"retire": "Retire a destination for good: flush its buffer once, then drop its changes (asks for --yes)",
	}[action]
	cmd := &cobra.Command{
		Use:   action + " (NAME | --value V)",
		Short: short,
		Long: short + `.
NAME is a destination name (canonical form only); --value V names the destination of a
tenant's own routing value, as the router names it. Neither is ever taken for the other.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			byValue := cmd.Flags().Changed("value")
			var q url.Values
			var label, confirm string
			switch {
			case len(args) == 1 && byValue:
				return &exitError{2, errors.New("give NAME or --value V, not both")}
			case len(args) == 1:
				if err := checkName(args[0]); err != nil {
					return err
				}
				q, label, confirm = url.Values{"destination": {args[0]}}, args[0], args[0]
			case byValue:
				q, label, confirm = url.Values{"value": {value}}, fmt.Sprintf("the destination of routing value %q", value), value
			default:
				return &exitError{2, errors.New("name the destination: NAME (a destination name) or --value V (a tenant's routing value)")}
			}
			if action == "retire" && !yes {
				if err := confirmRetire(cmd.InOrStdin(), cmd.ErrOrStderr(), label, confirm); err != nil {
					return &exitError{2, err}
				}
			}
			if ahead {
				q.Set("ahead", "true")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var ch api.LifecycleChange
			if err := c.do(cmd.Context(), http.MethodPost, "/api/v1/destinations/"+action, q, api.LifecycleRequest{Reason: reason}, &ch); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s -> %s\n", ch.Destination, ch.From, ch.To)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (shown by destinations list)")
	cmd.Flags().StringVar(&value, "value", "", "the destination of this routing value (a tenant's own value, named as the router names it)")
	if action == "retire" {
		cmd.Flags().BoolVar(&yes, "yes", false, "retire without asking")
		cmd.Flags().BoolVar(&ahead, "ahead", false, "retire a destination never seen yet (no pack flushed, no state set); refused without it")
	}
	return cmd
}

// confirmRetire asks on a terminal for want (the name or value given);
// without a terminal it refuses, saying what retiring does.
func confirmRetire(in io.Reader, errw io.Writer, label, want string) error {
	f, ok := in.(*os.File)
	if !ok {
		return fmt.Errorf(retireWarning+"; pass --yes to retire it", label)
	}
	if !isTerminal(f) {
		return fmt.Errorf(retireWarning+"; pass --yes to retire it", label)
	}
	fmt.Fprintf(errw, retireWarning+"\ntype %q to retire it: ", label, want)
	line, _ := bufio.NewReader(f).ReadString('\n')
	if strings.TrimSpace(line) != want {
		return fmt.Errorf("not confirmed: %s was not retired", label)
	}
	return nil
}

// isTerminal: a character device that is not /dev/null (what a process
// started without a stdin gets).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}
