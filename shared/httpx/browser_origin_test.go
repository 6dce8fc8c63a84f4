package httpx

import (
	"net/http"
	"strings"
	"testing"
)

// TestCrossOrigin: a page's own requests pass, every other page's is
// refused, and a client that is no browser passes.
func TestCrossOrigin(t *testing.T) {
	for _, c := range []struct {
		name, site, origin string
		noOrigin           bool
		refused            bool
	}{
		{name: "no browser headers (the CLI, curl)", noOrigin: true},
		{name: "same-origin fetch", site: "same-origin", origin: "http://127.0.0.1:8080"},
		{name: "typed URL", site: "none", noOrigin: true},
		{name: "cross-site form post", site: "cross-site", origin: "https://evil.example", refused: true},
		{name: "same-site, another port of localhost", site: "same-site", origin: "http://127.0.0.1:3000", refused: true},
		{name: "cross-site fetch whose Origin lies about nothing", site: "cross-site", origin: "http://127.0.0.1:8080", refused: true},
		{name: "no Sec-Fetch-Site, own Origin (plain http off localhost)", origin: "http://127.0.0.1:8080"},
		{name: "no Sec-Fetch-Site, foreign Origin", origin: "http://evil.example", refused: true},
		{name: "no Sec-Fetch-Site, other port", origin: "http://127.0.0.1:3000", refused: true},
		{name: "opaque origin", origin: "null", refused: true},
		{name: "empty Origin", origin: "", refused: true},
		{name: "Origin of another scheme", origin: "file://127.0.0.1:8080", refused: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/api/v1/x", nil)
			if c.site != "" {
				r.Header.Set("Sec-Fetch-Site", c.site)
			}
			if !c.noOrigin {
				r.Header["Origin"] = []string{c.origin}
			}
			why := CrossOrigin(r)
			if (why != "") != c.refused {
				t.Fatalf("CrossOrigin = %q, want refused %v", why, c.refused)
			}
			if c.refused && !strings.Contains(why, "Sec-Fetch-Site") && !strings.Contains(why, "page at") {
				t.Fatalf("the refusal does not say why: %q", why)
			}
		})
	}
}
