package cli

// sluice tokens create|list|revoke: tenant tokens (api/tokens.go), made and
// ended with the operator token (SLUICE_HTTP_TOKEN). A tenant then runs
// `sluice read` or `sluice export` with SLUICE_HTTP_TOKEN set to its own
// tenant token.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/state"
)

func newTokensCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Tenant tokens: a token that reads only one destination's rows, changes and exports",
		Long: `Tenant tokens, managed with the operator token (SLUICE_HTTP_TOKEN). A tenant token reads one
destination's rows, exports and changes, and the snapshot list; every other route answers 403.
It is stored hashed, expires (default 90d), and a revocation holds from the next request.
A tenant uses it as its SLUICE_HTTP_TOKEN with 'sluice read' and 'sluice export'.
A server without an operator token refuses to create one.`,
	}
	cmd.AddCommand(newTokensCreateCmd(g), newTokensListCmd(g), newTokensRevokeCmd(g))
	return cmd
}

func newTokensCreateCmd(g *globalFlags) *cobra.Command {
	var name, expires string
	var asJSON bool
	var target *targetFlags
	cmd := &cobra.Command{
		Use:   "create (--destination D | --value V) [--expires 30d] [--name N]",
		Short: "Create a tenant token for one destination; it is printed this once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := api.ParseExpiry(expires); err != nil {
				return &exitError{2, err}
			}
			q, err := target.query()
			if err != nil {
				return err
			}
			req := api.TokenRequest{Name: name, Expires: expires, Destination: q.Get("destination")}
			if q.Has("value") {
				v := q.Get("value")
				req.Value = &v
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var ct api.CreatedToken
			if err := c.do(cmd.Context(), http.MethodPost, "/api/v1/tokens", nil, req, &ct); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(ct)
			}
			fmt.Fprintln(out, ct.Secret)
			fmt.Fprintf(cmd.ErrOrStderr(), "token %s reads destination %s, expires %s.\nStore it now: it is not stored in plaintext and cannot be shown again (revoke with: sluice tokens revoke %s).\n",
				ct.ID, ct.Destination, when(ct.ExpiresAt, "never"), ct.ID)
			return nil
		},
	}
	target = addTargetFlags(cmd, true, "the token reads")
	cmd.Flags().StringVar(&expires, "expires", "", "how long it lives: days (30d), a duration (12h) or never (default 90d)")
	cmd.Flags().StringVar(&name, "name", "", "a name for it, shown by tokens list")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the token and its details as JSON")
	return cmd
}

func newTokensListCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "Every tenant token (never a secret): id, name, destination, created, expires, revoked",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var ts []state.Token
			if err := c.get(cmd.Context(), "/api/v1/tokens", nil, &ts); err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(ts)
			}
			return printTokens(cmd.OutOrStdout(), ts)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON")
	return cmd
}

func newTokensRevokeCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a tenant token: refused (401) from the next request on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, _, ok := state.ParseToken(args[0]); ok {
				return &exitError{2, errors.New("give the token's id (sluice tokens list), not the token itself")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var t state.Token
			if err := c.do(cmd.Context(), http.MethodDelete, "/api/v1/tokens/"+url.PathEscape(args[0]), nil, nil, &t); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "token %s (destination %s) revoked at %s\n", t.ID, t.Destination, when(t.RevokedAt, "?"))
			return nil
		},
	}
}

func printTokens(w io.Writer, ts []state.Token) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tDESTINATION\tCREATED\tEXPIRES\tREVOKED")
	for _, t := range ts {
		created := t.CreatedAt.UTC().Format(time.RFC3339)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, dash(t.Name), t.Destination, created, when(t.ExpiresAt, "never"), when(t.RevokedAt, "-"))
	}
	return tw.Flush()
}

func when(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return t.UTC().Format(time.RFC3339)
}
