package cli

// --destination NAME and --value V: the two ways a command names a
// destination, never one read as the other (the API's destination= and
// value=, api/target.go). --destination takes a canonical destination name
// only; --value takes a tenant's own routing value, which the server names
// the way the router does in the configured destinations.mode.

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/proto"
)

// targetFlags are a command's --destination and --value.
type targetFlags struct {
	cmd         *cobra.Command
	name, value string
}

// addTargetFlags adds --destination and --value to cmd, mutually
// exclusive; with required, one of them must be given.
func addTargetFlags(cmd *cobra.Command, required bool, what string) *targetFlags {
	t := &targetFlags{cmd: cmd}
	cmd.Flags().StringVar(&t.name, "destination", "", what+" the destination of this name (a destination name, canonical form only)")
	cmd.Flags().StringVar(&t.value, "value", "", what+" the destination of this routing value (a tenant's own value, named as the router names it)")
	cmd.MarkFlagsMutuallyExclusive("destination", "value")
	if required {
		cmd.MarkFlagsOneRequired("destination", "value")
	}
	return t
}

// given reports whether either flag was given (an empty --value "" is
// the empty routing value, a real one).
func (t *targetFlags) given() bool {
	return t.cmd.Flags().Changed("destination") || t.cmd.Flags().Changed("value")
}

// query returns the API parameters for the flags given (none: nil). A
// --destination that is not a canonical name is refused here, with the
// reason (an alias names its canonical form).
func (t *targetFlags) query() (url.Values, error) {
	switch {
	case t.cmd.Flags().Changed("destination"):
		if err := checkName(t.name); err != nil {
			return nil, err
		}
		return url.Values{"destination": {t.name}}, nil
	case t.cmd.Flags().Changed("value"):
		return url.Values{"value": {t.value}}, nil
	}
	return nil, nil
}

// checkName accepts a canonical destination name only.
func checkName(name string) error {
	err := proto.ValidateDestination(name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, proto.ErrNotCanonical):
		return &exitError{2, err}
	}
	return &exitError{2, fmt.Errorf("%w (to name a destination by a tenant's routing value, use --value)", err)}
}
