package source

import (
	"errors"
	"strings"
	"testing"
)

func TestServerVersionCheck(t *testing.T) {
	cases := []struct {
		num   int
		text  string
		major int
		ok    bool
	}{
		{90624, "9.6.24", 9, false},
		{100023, "10.23", 10, false},
		{130023, "13.23", 13, false},
		{139999, "13.99 (Debian 13.99-1)", 13, false},
		{140000, "14devel", 14, true},
		{140023, "14.23", 14, true},
		{150018, "15.18 (Debian 15.18-0+deb12u1)", 15, true},
		{160014, "16.14", 16, true},
		{170010, "17.10", 17, true},
		{180004, "18.4", 18, true},
		{190000, "19beta1", 19, true},
	}
	for _, c := range cases {
		v := ServerVersion{Num: c.num, Text: c.text}
		if got := v.Major(); got != c.major {
			t.Errorf("%d: Major() = %d, want %d", c.num, got, c.major)
		}
		err := v.Check()
		if c.ok {
			if err != nil {
				t.Errorf("%s: refused: %v", c.text, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted, want a refusal", c.text)
			continue
		}
		if !errors.Is(err, ErrInvalidSource) || !strings.Contains(err.Error(), "Postgres "+c.text) || !strings.Contains(err.Error(), "Postgres 14 or newer") {
			t.Errorf("%s: the refusal %q does not name the server's version and the one needed (or is not ErrInvalidSource)", c.text, err)
		}
	}
}
