package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Shutdown()
	kit.Cleanup()
	os.Exit(code)
}

type harness struct {
	t      *testing.T
	dsn    string
	dev    *kit.Dev
	server string
}

func (h *harness) exec(sql string) {
	h.t.Helper()
	conn, err := pgx.Connect(context.Background(), h.dsn)
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
}

func (h *harness) lsn() string {
	h.t.Helper()
	conn, err := pgx.Connect(context.Background(), h.dsn)
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var l string
	if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&l); err != nil {
		h.t.Fatal(err)
	}
	return l
}

func (h *harness) cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return kit.CLI(ctx, h.server, args...)
}

func (h *harness) mustCLI(args ...string) string {
	h.t.Helper()
	out, err := h.cli(args...)
	if err != nil {
		h.t.Fatalf("%v\n%s", err, h.dev.Tail())
	}
	return out
}

// ids reads tenant's copy of public.items from the latest snapshot.
func (h *harness) ids(tenant string) []int {
	h.t.Helper()
	out, err := h.cli("read", "--value", tenant, "--table", "public.items", "--format", "jsonl")
	if err != nil {
		return nil // no snapshot with it yet
	}
	var ids []int
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var row struct {
			ID int `json:"id"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			h.t.Fatalf("reading %s: %v: %s", tenant, err, line)
		}
		ids = append(ids, row.ID)
	}
	slices.Sort(ids)
	return ids
}

// eventually retries cond (no sleeping beyond a short poll) until it holds.
func (h *harness) eventually(timeout time.Duration, what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out after %s waiting for %s\n%s", timeout, what, h.dev.Tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type listRow struct {
	Destination string `json:"destination"`
	State       string `json:"state"`
	Reason      string `json:"reason"`
	Live        *struct {
		State        string `json:"state"`
		BufferedRows int64  `json:"buffered_rows"`
	} `json:"live"`
}

func (h *harness) list() map[string]listRow {
	h.t.Helper()
	var rows []listRow
	if err := json.Unmarshal([]byte(h.mustCLI("destinations", "list", "--json")), &rows); err != nil {
		h.t.Fatal(err)
	}
	out := map[string]listRow{}
	for _, r := range rows {
		out[r.Destination] = r
	}
	return out
}

// applied waits until the flusher shows tenant in state.
func (h *harness) applied(tenant, state string) {
	h.t.Helper()
	h.eventually(20*time.Second, tenant+" "+state+" in the flusher", func() bool {
		r, ok := h.list()[tenant]
		return ok && r.Live != nil && r.Live.State == state
	})
}

func (h *harness) metric(name string) float64 {
	resp, err := http.Get(h.server + "/metrics")
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func eq(a []int, b ...int) bool { return slices.Equal(a, b) }

// Pause, resume, drain and retire tenant a live while tenant b flows.
func TestPauseDrainRetire(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	start := time.Now()
	h := &harness{t: t, dsn: pgtest.NewDB(t)}
	h.exec(`CREATE TABLE public.items (tenant_id text NOT NULL, id int NOT NULL, v text, PRIMARY KEY (tenant_id, id))`)
	dev, err := kit.NewDev(t.TempDir(), kit.Source{DSN: h.dsn, Tables: []string{"public.items"}}, kit.Settings{FlushInterval: "500ms", PublisherInterval: "200ms"})
	if err != nil {
		t.Fatal(err)
	}
	h.dev, h.server = dev, dev.Server()
	t.Cleanup(func() { _ = dev.P.Stop(60 * time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := dev.EnsureRunning(ctx); err != nil {
		t.Fatal(err)
	}
	insert := func(tenant string, id int) {
		h.exec(fmt.Sprintf(`INSERT INTO public.items VALUES ('%s', %d, 'x')`, tenant, id))
	}
	wait := func(timeout time.Duration) error {
		_, err := kit.Wait(ctx, h.server, h.lsn(), timeout)
		return err
	}

	insert("a", 1)
	insert("b", 1)
	if err := wait(time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, dev.Tail())
	}
	if !eq(h.ids("a"), 1) || !eq(h.ids("b"), 1) {
		t.Fatalf("baseline: a %v b %v", h.ids("a"), h.ids("b"))
	}
	t.Logf("pipeline up and flowing after %s", time.Since(start))

	// Pause a: its rows are held, b's flow.
	if out := h.mustCLI("destinations", "pause", "a", "--reason", "maintenance"); !strings.Contains(out, "a: active -> paused") {
		t.Fatalf("pause: %q", out)
	}
	h.applied("a", "paused")
	insert("a", 2)
	insert("b", 2)
	h.eventually(30*time.Second, "b's new row", func() bool { return eq(h.ids("b"), 1, 2) })
	if got := h.ids("a"); !eq(got, 1) {
		t.Fatalf("paused a reads %v, want [1]", got)
	}
	// The frontier is held at a's oldest held change: its copy is not up
	// to date, and no snapshot says it is.
	if err := wait(2 * time.Second); err == nil {
		t.Fatal("sluice wait passed a paused destination's held change")
	}
	if r := h.list()["a"]; r.State != "paused" || r.Reason != "maintenance" || r.Live.BufferedRows != 1 {
		t.Fatalf("list: %+v", r)
	}

	// Resume a: its held row appears; the frontier moves on.
	h.mustCLI("destinations", "resume", "a")
	h.eventually(30*time.Second, "a's held row after resume", func() bool { return eq(h.ids("a"), 1, 2) })
	if err := wait(time.Minute); err != nil {
		t.Fatalf("after resume: %v", err)
	}

	// Drain a: flushed, then drained; a later row is held.
	h.mustCLI("destinations", "drain", "a")
	h.eventually(20*time.Second, "a drained", func() bool { return h.list()["a"].State == "drained" })
	h.applied("a", "drained")
	insert("a", 3)
	insert("b", 3)
	h.eventually(30*time.Second, "b's row while a is drained", func() bool { return eq(h.ids("b"), 1, 2, 3) })
	if got := h.ids("a"); !eq(got, 1, 2) {
		t.Fatalf("drained a reads %v, want [1 2]", got)
	}

	// Retire a: the held row is flushed once (its copy is consistent up
	// to retirement); later rows never appear; b is unaffected.
	if out, err := h.cli("destinations", "retire", "a"); err == nil || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("retire without --yes: %q %v", out, err)
	}
	h.mustCLI("destinations", "retire", "a", "--yes", "--reason", "offboarded")
	h.applied("a", "retired")
	insert("a", 4)
	insert("b", 4)
	if err := wait(time.Minute); err != nil {
		t.Fatalf("after retire the frontier must not wait for a: %v", err)
	}
	if got := h.ids("a"); !eq(got, 1, 2, 3) {
		t.Fatalf("retired a reads %v, want [1 2 3] (kept, and nothing after retirement)", got)
	}
	if got := h.ids("b"); !eq(got, 1, 2, 3, 4) {
		t.Fatalf("b reads %v", got)
	}
	if n := h.metric("sluice_router_retired_rows_total") + h.metric("sluice_flusher_retired_messages_total"); n < 1 {
		t.Fatalf("retired rows/messages counted: %v", n)
	}
	if _, err := h.cli("destinations", "resume", "a"); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("resuming a retired destination: %v", err)
	}
	t.Logf("done in %s", time.Since(start))
}
