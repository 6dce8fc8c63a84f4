package api

// The request guard of every call that changes state (the lifecycle
// POSTs, resyncs, purges, pins, dead-letter replays and purges), the same
// for the CLI and for the status page's buttons:
//
//   - the bearer token when one is set (httpx.Protect, for every path);
//   - ClientHeader, which no cross-site form can send and no cross-site
//     fetch can send without a CORS preflight, which this server never
//     grants (the CLI sends "sluice-cli", the page "sluice-ui");
//   - no sign of a page of another origin (httpx.CrossOrigin: its
//     Sec-Fetch-Site, or an Origin that is not this server's), so that
//     even a browser that leaked the header would be refused.
//
// Each refusal is 403 with the reason.

import (
	"net/http"

	"github.com/sluice-cdc/sluice/shared/httpx"
)

// changes wraps a handler that changes state in the request guard; what
// ends the refusal's message ("to pause a destination").
func changes(what string, f http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(ClientHeader) == "" {
			writeJSON(w, http.StatusForbidden, Error{Error: "send the " + ClientHeader + " header (the sluice CLI and the status page do) " + what})
			return
		}
		if why := httpx.CrossOrigin(r); why != "" {
			writeJSON(w, http.StatusForbidden, Error{Error: "forbidden: " + why + "; changes are taken from this server's own status page or from a client that is not a browser"})
			return
		}
		f(w, r)
	})
}
