package api

// How a request names a destination: by one of two parameters, never one
// read as the other.
//
//	destination=NAME  a destination name, in its canonical form only
//	                  (proto.ValidateDestination: "a.b" is not a name, and
//	                  the alias "~c4n65" is refused naming "~c4n64")
//	value=V           a tenant's own routing value, named the way the router
//	                  names it in the configured destinations.mode (auto:
//	                  proto.DestinationName; list: destinations.list)
//
// Where a destination is required, exactly one of them is (both, or
// neither, is 400). A name is never re-read as a value when it holds
// nothing, and a value is never taken as a name because it looks like one:
// a tenant whose routing value is literally "~c4n64" is value=~c4n64 (its
// destination is "~fphj8rhm6g"), while destination=~c4n64 is tenant "a.b".

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/sluice-cdc/sluice/proto"
)

// Parameter names.
const (
	paramDestination = "destination"
	paramValue       = "value"
)

// errNoDestination: a routing value that no destination stands for.
var errNoDestination = errors.New("names no destination")

// target reads the destination a request names; exactly one of
// destination= and value= must be given.
func (a *handler) target(q url.Values) (string, error) {
	name, ok, err := a.optionalTarget(q)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", errors.Join(ErrBadRequest, errors.New("name the destination: destination=NAME (a destination name) or value=V (a tenant's routing value)"))
	}
	return name, nil
}

// optionalTarget is target for a filter: ok is false when neither
// parameter is given.
func (a *handler) optionalTarget(q url.Values) (name string, ok bool, err error) {
	hasName, hasValue := q.Has(paramDestination), q.Has(paramValue)
	switch {
	case hasName && hasValue:
		return "", false, errors.Join(ErrBadRequest, errors.New("give destination= (a destination name) or value= (a routing value), not both"))
	case hasName:
		name := q.Get(paramDestination)
		if err := checkName(name); err != nil {
			return "", false, err
		}
		return name, true, nil
	case hasValue:
		name, err := a.valueName(q.Get(paramValue))
		if err != nil {
			return "", false, err
		}
		return name, true, nil
	}
	return "", false, nil
}

// checkName accepts a canonical destination name only.
func checkName(name string) error {
	err := proto.ValidateDestination(name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, proto.ErrNotCanonical):
		return errors.Join(ErrBadRequest, err)
	}
	return errors.Join(ErrBadRequest, fmt.Errorf("%w (to name a destination by a tenant's routing value, use value=)", err))
}

// valueName names a routing value the way the router does. A value the
// router would dead-letter or drop names no destination: ErrNotFound.
func (a *handler) valueName(value string) (string, error) {
	dc := a.d.Config.Destinations
	if dc.Mode == "list" {
		name, ok := dc.List[value]
		if !ok {
			return "", errors.Join(ErrNotFound, fmt.Errorf("routing value %q %w: it is not in destinations.list", value, errNoDestination))
		}
		return name, nil
	}
	name, err := proto.DestinationName(value)
	if err != nil {
		return "", errors.Join(ErrNotFound, fmt.Errorf("routing value %q %w: %w", value, errNoDestination, err))
	}
	return name, nil
}
