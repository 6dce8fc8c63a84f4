package api

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/shared/config"
)

// destination= takes a canonical name only, value= a routing value named
// as the router names it; neither is read as the other, exactly one is
// required.
func TestTargetParameters(t *testing.T) {
	auto := &handler{d: Deps{Config: config.Config{Destinations: config.Destinations{Mode: "auto"}}}}
	list := &handler{d: Deps{Config: config.Config{Destinations: config.Destinations{Mode: "list", List: map[string]string{"acme.corp": "acme", "42": "answer", "~c4n64": "tilde"}}}}}
	for _, c := range []struct {
		h     *handler
		query string
		want  string
	}{
		{auto, "destination=shop1", "shop1"},
		{auto, "value=shop1", "shop1"},
		{auto, "destination=~c4n64", "~c4n64"}, // the name of "a.b"
		{auto, "value=a.b", "~c4n64"},          // named as the router names it
		{auto, "value=~c4n64", "~fphj8rhm6g"},  // a value that looks like a name is a value
		{auto, "value=", "~"},                  // the empty routing value is a value
		{auto, "value=acme.corp%2Fx", "~c5hmqp9ecdnn4s1ff0"},
		{list, "value=acme.corp", "acme"},
		{list, "value=~c4n64", "tilde"},
		{list, "destination=42", "42"}, // a name, not the listed value 42
		{list, "value=42", "answer"},
		{list, "destination=unlisted", "unlisted"}, // any name can be asked for
	} {
		q, _ := url.ParseQuery(c.query)
		got, err := c.h.target(q)
		if err != nil || got != c.want {
			t.Errorf("%s (mode %s): %q, %v; want %q", c.query, c.h.d.Config.Destinations.Mode, got, err, c.want)
		}
	}
	for _, c := range []struct {
		h        *handler
		query    string
		sentinel error
		says     string
	}{
		{auto, "", ErrBadRequest, "destination=NAME"},
		{auto, "destination=a&value=a", ErrBadRequest, "not both"},
		{auto, "destination=", ErrBadRequest, "value="},
		{auto, "destination=a.b", ErrBadRequest, "use value="},                                      // a value is not a name
		{auto, "destination=~c4n65", ErrBadRequest, "the canonical name of that value is ~c4n64"},   // an alias
		{auto, "destination=~c5h66p35", ErrBadRequest, "the canonical name of that value is abcde"}, // the encoding of a plain name
		{auto, "value=" + strings.Repeat("%C3%A9", 200), ErrNotFound, "names no destination"},       // unroutable
		{list, "value=not+listed", ErrNotFound, "not in destinations.list"},                         // dead-lettered or dropped
		{list, "destination=~c4n65", ErrBadRequest, "the canonical name of that value is ~c4n64"},
	} {
		q, _ := url.ParseQuery(c.query)
		got, err := c.h.target(q)
		if !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q (mode %s) = %q, %v; want %v saying %q", c.query, c.h.d.Config.Destinations.Mode, got, err, c.sentinel, c.says)
		}
	}
	// A filter may name nothing.
	if _, ok, err := auto.optionalTarget(url.Values{}); ok || err != nil {
		t.Errorf("no filter: %v %v", ok, err)
	}
}
