package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/sluice-cdc/sluice/shared/pgtest"
)

// clicker drives one headless Chromium over the DevTools protocol: it
// opens pages, clicks, types, and answers confirm() dialogs as told.
type clicker struct {
	t   *testing.T
	ctx context.Context
	// accept is the answer to the next confirm() dialogs; dialogs counts
	// them.
	accept  atomic.Bool
	dialogs atomic.Int32
}

// actionsToken is the HTTP token TestActions runs sluice dev with: the
// browser is asked for it as a person is (HTTP Basic), and the test's own
// API calls send it as a bearer token.
const actionsToken = "ui-actions-token"

// authGet is getJSON with the token.
func authGet(server, path string, v any) error {
	req, err := http.NewRequest(http.MethodGet, server+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+actionsToken)
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// newClicker starts Chromium; when the server asks for credentials it
// answers them as a person types them into the browser's prompt (any
// user name, the token as password), after which the browser sends them
// with the page's own fetches.
func newClicker(t *testing.T, bin string) *clicker {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	c := &clicker{t: t, ctx: ctx}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	auth := chromedp.Events(ctx, fetch.AuthRequired)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	}()
	go func() {
		for ev, err := range auth {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID,
				AuthChallengeResponse: &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials, Username: "operator", Password: actionsToken}})
		}
	}()
	yes := true
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: &yes}); err != nil {
		t.Fatalf("answering the browser's credential prompts: %v", err)
	}
	// A confirm() blocks the page until it is answered: a goroutine
	// answers each one as told.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			c.dialogs.Add(1)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: c.accept.Load()})
		}
	}()
	return c
}

// run runs steps with a deadline.
func (c *clicker) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
}

// open loads url and waits for sel.
func (c *clicker) open(url, sel string) {
	c.t.Helper()
	c.run("opening "+url, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(sel)))
}

func (c *clicker) click(sel string) {
	c.t.Helper()
	c.run("clicking "+sel, chromedp.WaitEnabled(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
}

// press clicks sel the way its handler sees a click (element.click()),
// for the buttons of tables the page re-renders every refresh, whose rows
// a mouse click at the button's last position could miss as the layout
// shifts under it.
func (c *clicker) press(sel string) {
	c.t.Helper()
	c.run("clicking "+sel, chromedp.WaitEnabled(chromedp.CSS(sel)),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).click()`, sel)))
}

// typeIn replaces the value of the input sel by typing v.
func (c *clicker) typeIn(sel, v string) {
	c.t.Helper()
	c.run("typing in "+sel, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).value = ""`, sel)),
		chromedp.SendKeys(chromedp.CSS(sel), v))
}

// shot keeps a screenshot of the page as it is, under
// SLUICE_UI_SCREENSHOT_DIR (the browser holds the credentials, which
// screenshot's own Chromium would not).
func (c *clicker) shot(name string) {
	c.t.Helper()
	if shotDir() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		c.t.Fatalf("screenshot %s: %v", name, err)
	}
	path, _ := filepath.Abs(filepath.Join(shotDir(), name))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("screenshot %s", path)
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](c *clicker, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// text is the text of the first element sel matches ("" when none does).
func (c *clicker) text(sel string) string {
	s, err := eval[string](c, fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ""`, sel))
	if err != nil {
		c.t.Fatalf("reading %s: %v", sel, err)
	}
	return s
}

// waitText waits until sel's text contains want, and returns it.
func (c *clicker) waitText(sel, want string) string {
	c.t.Helper()
	var got string
	until(c.t, 30*time.Second, fmt.Sprintf("%s never said %q", sel, want), func() error {
		got = c.text(sel)
		if !strings.Contains(got, want) {
			return fmt.Errorf("it says %q", got)
		}
		return nil
	})
	return got
}

// say is the page's message line after an action.
const say = "#a-msg"

// TestActions starts one `sluice dev`, behind a token, on a source of four
// tenants and clicks every action of the status page in headless Chromium
// (which is given the token as a person types it into the browser's
// prompt), checking each one's effect through the API: pause, resume and
// drain; a resync of one destination and of the whole table with their
// progress bars; pin and unpin; a dead letter (a row whose routing value
// makes no destination name) shown, replayed, purged, and the DLQ
// replayed and purged whole, a cancelled confirm() purging nothing; a
// purge refused before the retire with the API's message on the page,
// then retire and purge behind the typed destination name.
func TestActions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sluice dev")
	}
	bin := chromium(t)
	t.Setenv("SLUICE_HTTP_TOKEN", actionsToken)
	server, dsn := startItems(t, "sluice_ui_actions")
	b := newClicker(t, bin)

	t.Run("pause resume drain", func(t *testing.T) {
		b.t = t
		b.open(server+"/ui?destination=a1", `#d-actions button[data-life="pause"]`)
		for _, c := range []struct{ action, want string }{
			{"pause", "paused"}, {"resume", "active"}, {"drain", "draining drained"},
		} {
			b.click(`#d-actions button[data-life="` + c.action + `"]`)
			b.waitText(say, "a1: ")
			b.waitText(say, "→ "+strings.Fields(c.want)[0])
			until(t, 20*time.Second, "a1 never became "+c.want, func() error {
				st := lifecycleState(t, server, "a1")
				if !strings.Contains(c.want, st) {
					return fmt.Errorf("a1 is %s", st)
				}
				return nil
			})
			b.waitText("#a-life", strings.Fields(c.want)[0][:5])
		}
	})

	t.Run("resync of a destination and of the table", func(t *testing.T) {
		b.t = t
		b.open(server+"/ui?destination=a2", "#a-resync-dest")
		until(t, 20*time.Second, "the resync select never offered public.items", func() error {
			if v, err := eval[string](b, `document.querySelector("#a-table").value`); err != nil || v != "public.items" {
				return fmt.Errorf("select %q %v", v, err)
			}
			return nil
		})
		b.click("#a-resync-dest")
		b.waitText(say, "for a2 queued")
		bar := `#a-progress .prog[data-scope="destination"][data-state="done"]`
		until(t, 90*time.Second, "the destination's resync bar never showed done", func() error {
			if n, err := eval[int](b, fmt.Sprintf(`document.querySelectorAll(%q).length`, bar)); err != nil || n == 0 {
				return fmt.Errorf("no done bar: %q", b.text("#a-progress"))
			}
			return nil
		})
		if got := b.text(bar); !strings.Contains(got, "200 / ~") && !strings.Contains(got, "200 rows") {
			t.Errorf("the destination's resync bar says %q, want its 200 rows", got)
		}
		var rs []struct {
			ID          int64  `json:"id"`
			Destination string `json:"destination"`
			State       string `json:"state"`
			Rows        int64  `json:"rows_copied"`
		}
		if err := authGet(server, "/api/v1/resyncs", &rs); err != nil || len(rs) == 0 || rs[0].Destination != "a2" || rs[0].State != "done" || rs[0].Rows != 200 {
			t.Fatalf("the API's resyncs: %+v %v", rs, err)
		}
		b.click("#a-resync-table")
		b.waitText(say, "(every destination) queued")
		until(t, 90*time.Second, "the table's resync bar never showed done", func() error {
			got := b.text(`#a-progress .prog[data-scope="table"][data-state="done"]`)
			if !strings.Contains(got, "800") {
				return fmt.Errorf("bars: %q", b.text("#a-progress"))
			}
			return nil
		})
		b.shot("ui-actions.png")
	})

	t.Run("pin and unpin", func(t *testing.T) {
		b.t = t
		b.open(server+"/ui", "#snaps button[data-pin]")
		v, err := eval[string](b, `document.querySelector("#snaps button[data-pin]").dataset.pin`)
		if err != nil {
			t.Fatal(err)
		}
		b.press(`#snaps button[data-pin="` + v + `"][data-on="true"]`)
		b.waitText(say, "snapshot v"+v+" pinned")
		if !pinned(t, server, v) {
			t.Fatalf("v%s is not pinned after the click", v)
		}
		b.waitText("#snaps", "pinned")
		// The destination page unpins the snapshot it shows.
		b.open(server+"/ui?destination=a3&snapshot="+v, "#a-unpin")
		b.waitText("#a-snap", "v"+v)
		b.click("#a-unpin")
		b.waitText(say, "snapshot v"+v+" unpinned")
		if pinned(t, server, v) {
			t.Fatalf("v%s is still pinned after the click", v)
		}
	})

	t.Run("dead letters", func(t *testing.T) {
		b.t = t
		// A routing value whose name would pass 200 characters: the router
		// dead-letters its row.
		bad := strings.Repeat("x.", 70)
		pgtest.Exec(t, dsn, `INSERT INTO public.items VALUES ('`+bad+`', 1, 'bad')`)
		first := waitDeadLetter(t, server, 0)
		b.open(server+"/ui", fmt.Sprintf(`#dlq tr[data-seq="%d"]`, first))
		b.shot("ui-actions-dlq.png")
		b.press(fmt.Sprintf(`#dlq tr[data-seq="%d"] button[data-op="show"]`, first))
		if got := b.waitText("#dlq tr.a-detail", "Sluice-Stage: router"); !strings.Contains(got, "body:") {
			t.Fatalf("the dead letter's detail: %q", got)
		}
		b.press(fmt.Sprintf(`#dlq tr[data-seq="%d"] button[data-op="replay"]`, first))
		b.waitText(say, fmt.Sprintf("dead letter %d replayed to sluice.replay.", first))
		// The router takes it again and, its value still unroutable,
		// dead-letters it anew.
		again := waitDeadLetter(t, server, first)
		if seqs := deadLetters(t, server); seqs[first] {
			t.Fatalf("dead letter %d is still there after its replay: %v", first, seqs)
		}
		row := fmt.Sprintf(`#dlq tr[data-seq="%d"]`, again)
		until(t, 20*time.Second, "the replayed dead letter never showed", func() error {
			if b.text(row) == "" {
				return fmt.Errorf("the table: %q", b.text("#dlq"))
			}
			return nil
		})
		// A cancelled confirm() purges nothing; an accepted one does.
		b.accept.Store(false)
		n := b.dialogs.Load()
		b.press(row + ` button[data-op="purge"]`)
		until(t, 10*time.Second, "no confirm() was asked", func() error {
			if b.dialogs.Load() == n {
				return fmt.Errorf("no dialog")
			}
			return nil
		})
		time.Sleep(time.Second)
		if !deadLetters(t, server)[again] {
			t.Fatalf("a cancelled purge removed dead letter %d", again)
		}
		b.accept.Store(true)
		b.press(row + ` button[data-op="purge"]`)
		b.waitText(say, fmt.Sprintf("dead letter %d purged", again))
		if deadLetters(t, server)[again] {
			t.Fatalf("dead letter %d is still there after its purge", again)
		}
		// Replay all, then purge all.
		pgtest.Exec(t, dsn, `UPDATE public.items SET note = 'again' WHERE tenant_id = '`+bad+`'`)
		third := waitDeadLetter(t, server, again)
		b.press("#dlq-replay-all")
		b.waitText(say, "replayed 1 of 1 dead letters")
		fourth := waitDeadLetter(t, server, third)
		b.press("#dlq-purge-all")
		b.waitText(say, "purged ")
		if seqs := deadLetters(t, server); len(seqs) != 0 {
			t.Fatalf("dead letters after purge all (the last was %d): %v", fourth, seqs)
		}
		b.waitText("#dlq", "no dead letters")
	})

	t.Run("retire and purge", func(t *testing.T) {
		b.t = t
		b.open(server+"/ui?destination=a4", "#a-purge")
		// The purge of an active destination: the API refuses, the page says why.
		b.click("#a-purge")
		b.typeIn("#a-confirm-name", "a3")
		if disabled, err := eval[bool](b, `document.querySelector("#a-confirm-go").disabled`); err != nil || !disabled {
			t.Fatalf("the confirm button is enabled under a wrong name (%v)", err)
		}
		b.typeIn("#a-confirm-name", "a4")
		b.click("#a-confirm-go")
		b.waitText(say, "purge a4: destination a4 is active, not retired")
		// Retire, behind the typed name.
		b.click("#a-retire")
		b.typeIn("#a-confirm-name", "a4")
		b.click("#a-confirm-go")
		b.waitText(say, "a4: active → retired")
		if st := lifecycleState(t, server, "a4"); st != "retired" {
			t.Fatalf("a4 is %s after retire", st)
		}
		b.waitText("#a-life", "retired")
		if disabled, err := eval[bool](b, `document.querySelector('#d-actions button[data-life="resume"]').disabled`); err != nil || !disabled {
			t.Fatalf("resume is offered for a retired destination (%v)", err)
		}
		b.click("#a-purge")
		b.typeIn("#a-confirm-name", "a4")
		b.click("#a-confirm-go")
		b.waitText(say, "purge of a4 requested")
		b.waitText("#a-purge-status", "purge: done")
		var st struct {
			Request string `json:"request"`
		}
		if err := authGet(server, "/api/v1/destinations/a4/purge", &st); err != nil || st.Request != "done" {
			t.Fatalf("the API's purge of a4: %+v %v", st, err)
		}
	})
}

// startItems runs `sluice dev` on a source table public.items of four
// tenants, a1 to a4 (200 rows each), with its own replication slot (slots
// are the Postgres cluster's, shared by every test database), and waits
// for their first snapshot; it returns the server and the source's DSN.
func startItems(t *testing.T, slot string) (string, string) {
	t.Helper()
	dsn := pgtest.NewDB(t)
	pgtest.Exec(t, dsn, `
CREATE TABLE public.items (tenant_id text NOT NULL, id bigint NOT NULL, note text, PRIMARY KEY (tenant_id, id));
INSERT INTO public.items SELECT 'a' || (g % 4 + 1), g, 'n' || g FROM generate_series(1, 800) g;`)
	server := startDev(t, fmt.Sprintf(`source:
  dsn: %s
  tables: [public.items]
  routing_column: tenant_id
  slot: %s
  publication: sluice_ui_actions
  backfill: true
`, dsn, slot))
	until(t, 2*time.Minute, "the backfill never reached a snapshot", func() error {
		var d destPage
		if err := authGet(server, "/api/v1/destinations?limit=10", &d); err != nil {
			return err
		}
		var s summary
		if err := authGet(server, "/api/v1/status/summary", &s); err != nil {
			return err
		}
		if d.Total < 4 || len(s.Snapshots) == 0 {
			return fmt.Errorf("%d destinations, %d snapshots", d.Total, len(s.Snapshots))
		}
		return nil
	})
	return server, dsn
}

// TestActionsFromAnotherSite opens, in the browser of an operator who has
// the status page open, a page of another site (http://localhost:PORT
// against the server's http://127.0.0.1:PORT) whose form post, fetch with
// the client header (which needs a preflight) and no-cors fetch each try
// to change a destination: it stays active. The server has no token, as
// `sluice dev` on loopback by default, so only the request guard stands
// in the way (with the guard switched off the no-cors fetch retires it).
func TestActionsFromAnotherSite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sluice dev")
	}
	bin := chromium(t)
	server, _ := startItems(t, "sluice_ui_cross_site")
	b := newClicker(t, bin)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form id="f" method="POST" action="%[1]s/api/v1/destinations/a3/pause" target="sink"><input name="reason" value="evil"></form>
<iframe name="sink"></iframe><script>
window.results = [];
fetch("%[1]s/api/v1/destinations/a3/drain", {method: "POST", headers: {"X-Sluice-Client": "evil"}}).then(r => results.push("cors " + r.status), () => results.push("cors refused"));
fetch("%[1]s/api/v1/destinations/a3/retire", {method: "POST", mode: "no-cors", credentials: "include"}).then(r => results.push("no-cors " + r.type), () => results.push("no-cors refused"));
document.getElementById("f").submit();
</script>`, server)
	}))
	defer evil.Close()
	b.open(server+"/ui", "#snaps") // the operator's own tab
	b.open(strings.Replace(evil.URL, "127.0.0.1", "localhost", 1), "iframe")
	var results []string
	until(t, 20*time.Second, "the other site's fetches never ended", func() error {
		var err error
		results, err = eval[[]string](b, `window.results || []`)
		if err == nil && len(results) < 2 {
			err = fmt.Errorf("results %v", results)
		}
		return err
	})
	if !slices.Contains(results, "cors refused") {
		t.Errorf("the cross-site fetch with the client header was let through: %v", results)
	}
	time.Sleep(2 * time.Second) // the form post's answer, and a state poll
	if st := lifecycleState(t, server, "a3"); st != "active" {
		t.Fatalf("another site's page made a3 %s (fetches: %v)", st, results)
	}
}

// lifecycleState is a destination's lifecycle state, from the API.
func lifecycleState(t *testing.T, server, name string) string {
	t.Helper()
	var rows []struct {
		Destination string `json:"destination"`
		State       string `json:"state"`
	}
	if err := authGet(server, "/api/v1/destinations/states?destination="+name, &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Destination == name {
			return r.State
		}
	}
	return "active"
}

// pinned reports whether snapshot v is pinned, from the API.
func pinned(t *testing.T, server, v string) bool {
	t.Helper()
	var snaps []struct {
		Version json.Number `json:"version"`
		Pinned  bool        `json:"pinned"`
	}
	if err := authGet(server, "/api/v1/snapshots", &snaps); err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if s.Version.String() == v {
			return s.Pinned
		}
	}
	t.Fatalf("snapshot v%s is not retained", v)
	return false
}

// deadLetters are the sequences of the DLQ, from the API.
func deadLetters(t *testing.T, server string) map[uint64]bool {
	t.Helper()
	var list []struct {
		Seq uint64 `json:"seq"`
	}
	if err := authGet(server, "/api/v1/dlq", &list); err != nil {
		t.Fatal(err)
	}
	out := map[uint64]bool{}
	for _, d := range list {
		out[d.Seq] = true
	}
	return out
}

// waitDeadLetter waits for a dead letter of the router above sequence
// after, and returns its sequence.
func waitDeadLetter(t *testing.T, server string, after uint64) uint64 {
	t.Helper()
	var seq uint64
	until(t, 60*time.Second, fmt.Sprintf("no dead letter of the router after %d", after), func() error {
		var list []struct {
			Seq   uint64 `json:"seq"`
			Stage string `json:"stage"`
		}
		if err := authGet(server, "/api/v1/dlq", &list); err != nil {
			return err
		}
		for _, d := range list {
			if d.Seq > after && d.Stage == "router" {
				seq = d.Seq
				return nil
			}
		}
		var st struct {
			Services map[string]json.RawMessage `json:"services"`
		}
		_ = authGet(server, "/api/v1/status", &st)
		return fmt.Errorf("dead letters %+v; router %s; reader %.600s", list, st.Services["router"], st.Services["reader"])
	})
	return seq
}
