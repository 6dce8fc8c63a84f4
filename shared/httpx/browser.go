package httpx

import (
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// NoBrowser answers 403 to every request a web browser could send from
// another site's page, for a server no browser page should drive
// (`sluice catalog serve`): a request with an Origin header (browsers send
// it on every cross-origin request and every POST), one whose
// Sec-Fetch-Site says a page made it (anything but "none", which is the
// user typing the URL), and a POST or PUT whose body has a content type a
// cross-site form or no-preflight fetch can send (text/plain,
// application/x-www-form-urlencoded, multipart/form-data) unless it also
// carries a header no such request can carry (customHeader, a prefix such
// as "X-ClickHouse-"; a browser would first ask by a CORS preflight, which
// this server never grants). An older browser that sends neither Origin
// nor Sec-Fetch-* is still stopped by the content-type rule. hint, when
// set, ends the refusal of a simple content type (how a client sends it).
func NoBrowser(next http.Handler, customHeader, hint string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := browserShaped(r, customHeader, hint); why != "" {
			http.Error(w, "forbidden: "+why+"; this server does not answer web pages", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// browserShaped says why r looks like a request a web page made, or "".
func browserShaped(r *http.Request, customHeader, hint string) string {
	if _, ok := r.Header["Origin"]; ok {
		return "the request carries an Origin header (" + r.Header.Get("Origin") + ")"
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "none" {
		return "the request was made by a web page (Sec-Fetch-Site: " + s + ")"
	}
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		return ""
	}
	if !simpleContentType(r.Header.Get("Content-Type")) {
		return ""
	}
	for k := range r.Header {
		if customHeader != "" && strings.HasPrefix(http.CanonicalHeaderKey(k), http.CanonicalHeaderKey(customHeader)) {
			return ""
		}
	}
	why := "a " + r.Method + " with Content-Type " + r.Header.Get("Content-Type") + " and no " + customHeader + "* header is what a cross-site form sends: send no Content-Type (curl: -H 'Content-Type:') or application/octet-stream"
	if hint != "" {
		why += ", or " + hint
	}
	return why
}

// simpleContentType reports whether ct is one a browser sends cross-site
// without a CORS preflight.
func simpleContentType(ct string) bool {
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		// A browser sends well-formed ones; refuse what cannot be judged.
		return true
	}
	switch strings.ToLower(mt) {
	case "text/plain", "application/x-www-form-urlencoded", "multipart/form-data":
		return true
	}
	return false
}

// CrossOrigin says why r was sent by a page of another origin than the
// server it reached, or "" when it was not: the check every request that
// changes state passes, so that the status page's own fetches work and no
// other page's form post or fetch does. A browser that sends Sec-Fetch-Site
// (every current one, to https and to localhost) is judged by it alone:
// "same-origin", or "none" (the user typed the URL), and nothing else —
// "same-site" is refused too, as another port of localhost is the same
// site. Without it, an Origin header must name the host and port the
// request names in Host (a reverse proxy must keep Host); "null" never
// does. A request with neither is not a browser's cross-origin one (or is
// an older browser's, which the callers' custom-header rule stops).
func CrossOrigin(r *http.Request) string {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		if s == "same-origin" || s == "none" {
			return ""
		}
		return "the request was made by a page of another origin (Sec-Fetch-Site: " + s + ")"
	}
	vs, ok := r.Header["Origin"]
	if !ok {
		return ""
	}
	origin := ""
	if len(vs) > 0 {
		origin = vs[0]
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || !strings.EqualFold(u.Host, r.Host) {
		return "the request comes from a page at " + strconv.Quote(origin) + ", not from this server (" + r.Host + ")"
	}
	return ""
}
