package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/config"
)

// A destination argument is a name, or a routing value named the way the
// router names it in the configured mode.
func TestDestinationArgument(t *testing.T) {
	auto := &handler{d: Deps{Config: config.Config{Destinations: config.Destinations{Mode: "auto"}}}}
	list := &handler{d: Deps{Config: config.Config{Destinations: config.Destinations{Mode: "list", List: map[string]string{"acme.corp": "acme", "42": "answer"}}}}}
	for _, c := range []struct {
		h        *handler
		arg, out string
	}{
		{auto, "shop1", "shop1"},
		{auto, "~c5hmqp9ecdnn4s1ff0", "~c5hmqp9ecdnn4s1ff0"}, // already a name
		{auto, "acme.corp/x", "~c5hmqp9ecdnn4s1ff0"},
		{auto, "größe ü", mustName(t, "größe ü")},
		{auto, strings.Repeat("x", 70), mustName(t, strings.Repeat("x", 70))},
		{list, "acme.corp", "acme"},
		{list, "42", "42"}, // a name wins over a listed value
		{list, "answer", "answer"},
	} {
		got, err := c.h.destination(c.arg)
		if err != nil || got != c.out {
			t.Errorf("destination(%q) = %q, %v; want %q", c.arg, got, err, c.out)
		}
	}
	for _, c := range []struct {
		h   *handler
		arg string
	}{{auto, ""}, {auto, strings.Repeat("é", 200)}, {list, "not listed!"}} {
		if got, err := c.h.destination(c.arg); !errors.Is(err, proto.ErrBadDestination) {
			t.Errorf("destination(%q) = %q, %v; want ErrBadDestination", c.arg, got, err)
		}
	}
}

func mustName(t *testing.T, v string) string {
	t.Helper()
	n, err := proto.DestinationName(v)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
