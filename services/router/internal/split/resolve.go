package split

import (
	"fmt"

	"github.com/sluice-cdc/sluice/proto"
)

// Action is what happens to the rows of one routing value.
type Action uint8

const (
	// Deliver sends the rows to Route.Destination.
	Deliver Action = iota
	// DeadLetter sends the rows to the dead-letter stream with Route.Reason.
	DeadLetter
	// Drop counts the rows and discards them (mode list, unlisted: drop).
	Drop
)

// Route is the decision for one routing value.
type Route struct {
	Action      Action
	Destination string // Deliver: a valid destination name
	Reason      string // DeadLetter, Drop: why
}

// Resolve decides the route of one routing value, given in its text form
// (an integer in decimal, a string as is). It is called once per distinct
// value per batch and must be safe for concurrent use.
type Resolve func(value string) Route

// Auto is destinations.mode auto: every value is its own destination
// (proto.DestinationName); a value that makes no valid name is dead-lettered.
func Auto() Resolve {
	return func(value string) Route {
		name, err := proto.DestinationName(value)
		if err != nil {
			return Route{Action: DeadLetter, Reason: err.Error()}
		}
		return Route{Action: Deliver, Destination: name}
	}
}

// List is destinations.mode list: listed values (text form) map to their
// named destination; an unlisted value is dead-lettered, or dropped when
// dropUnlisted is set. The map is copied.
func List(list map[string]string, dropUnlisted bool) (Resolve, error) {
	m := make(map[string]string, len(list))
	for v, name := range list {
		if err := proto.ValidateDestination(name); err != nil {
			return nil, fmt.Errorf("checking destinations.list value %q: %w", v, err)
		}
		m[v] = name
	}
	return func(value string) Route {
		if name, ok := m[value]; ok {
			return Route{Action: Deliver, Destination: name}
		}
		r := Route{Action: DeadLetter, Reason: fmt.Sprintf("routing value %q is not in destinations.list", value)}
		if dropUnlisted {
			r.Action = Drop
		}
		return r
	}, nil
}
