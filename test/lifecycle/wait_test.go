package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/test/kit"
)

// waitExit runs `sluice wait --through-lsn lsn` and returns its exit code
// and stderr.
func (h *harness) waitExit(lsn string, timeout time.Duration) (int, string) {
	h.t.Helper()
	bin, err := kit.SluiceBin()
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "wait", "--through-lsn", lsn, "--timeout", timeout.String(), "--server", h.server)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), errb.String()
	}
	h.t.Fatalf("running sluice wait: %v", err)
	return -1, ""
}

// sluice wait exits 0 once the latest snapshot includes every change at or
// below the LSN, 1 on timeout, and 2, naming the table, when a halted table
// holds a change at or below it (no snapshot will include it until an
// operator acts), while an LSN below the halt still passes.
func TestWaitExitsTwoOnHaltedTable(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	start := time.Now()
	h := &harness{t: t, dsn: pgtest.NewDB(t)}
	h.exec(`CREATE TABLE public.items (tenant_id text NOT NULL, id int NOT NULL, v text, PRIMARY KEY (tenant_id, id));
		CREATE TABLE public.notes (tenant_id text NOT NULL, id int NOT NULL, PRIMARY KEY (tenant_id, id))`)
	dev, err := kit.NewDev(t.TempDir(), kit.Source{DSN: h.dsn, Tables: []string{"public.items", "public.notes"}}, kit.Settings{FlushInterval: "500ms", PublisherInterval: "200ms"})
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

	h.exec(`INSERT INTO public.items VALUES ('a', 1, 'x'), ('b', 1, 'x')`)
	if code, stderr := h.waitExit(h.lsn(), time.Minute); code != 0 {
		t.Fatalf("wait on a flowing pipeline exited %d: %s\n%s", code, stderr, dev.Tail())
	}
	t.Logf("pipeline up and flowing after %s", time.Since(start))

	// Timeout: a paused destination holds its change, which is not halted.
	h.mustCLI("destinations", "pause", "a")
	h.applied("a", "paused")
	h.exec(`INSERT INTO public.notes VALUES ('a', 1)`)
	if code, stderr := h.waitExit(h.lsn(), 2*time.Second); code != 1 {
		t.Fatalf("wait for a paused destination's change exited %d, want 1 (timeout): %s", code, stderr)
	}
	h.mustCLI("destinations", "resume", "a")
	before := h.lsn()
	if code, stderr := h.waitExit(before, time.Minute); code != 0 {
		t.Fatalf("wait after resume exited %d: %s\n%s", code, stderr, dev.Tail())
	}
	t.Logf("timeout and resume checked after %s", time.Since(start))

	// Halt public.items by a column type change (a TRUNCATE is applied, not
	// halted: docs/adr/0024-clear.md): its first change after it and every
	// later one are in no snapshot, while public.notes flows on.
	// The reader tells a type change against the kinds the stream carried
	// for the table (services/reader/internal/capture/kinds.go); a change of
	// public.items streams first all the same.
	h.exec(`INSERT INTO public.items VALUES ('b', 3, 'y')`)
	if code, stderr := h.waitExit(h.lsn(), time.Minute); code != 0 {
		t.Fatalf("wait before the halt exited %d: %s\n%s", code, stderr, dev.Tail())
	}
	before = h.lsn()
	h.exec(`ALTER TABLE public.items ALTER COLUMN v TYPE int USING length(v)`)
	h.exec(`INSERT INTO public.items VALUES ('b', 2, 3)`)
	h.exec(`INSERT INTO public.notes VALUES ('b', 1)`)
	after := h.lsn()
	code, stderr := h.waitExit(after, time.Minute)
	if code != 2 || !strings.Contains(stderr, "public.items") || !strings.Contains(stderr, "halted") {
		t.Fatalf("wait past a halted table's change exited %d, want 2 naming public.items: %s\n%s", code, stderr, dev.Tail())
	}
	t.Logf("wait past the halt after %s: exit 2: %s", time.Since(start), strings.TrimSpace(stderr))
	// An LSN below the halt is still answered by a snapshot.
	if code, stderr := h.waitExit(before, time.Minute); code != 0 {
		t.Fatalf("wait for an LSN below the halt exited %d: %s", code, stderr)
	}
	// The other table's change after the halt is published.
	h.eventually(30*time.Second, "b's note after the halt", func() bool {
		out, err := h.cli("read", "--destination", "b", "--table", "public.notes", "--format", "jsonl")
		return err == nil && (strings.Contains(out, `"id": 1`) || strings.Contains(out, `"id":1`))
	})
}
