package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/state"
)

// `sluice destinations purge NAME --yes --json` over the real API, state
// database and chDB, while a stand-in for the publisher's lifecycle tick
// runs the requested purges: refused without --yes and for an active
// destination; for a retired one it waits and prints the final status,
// with nothing left.
func TestDestinationsPurgeCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Postgres")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := state.Migrate(ctx, pool, "sluice"); err != nil {
		t.Fatal(err)
	}
	states := state.NewDestinationStates(pool, "sluice")
	c := catalog.New(chtest.Conn(t), catalog.Options{Prefix: "sluice"})
	if err := c.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(t.TempDir(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	var refs []catalog.PackRef
	for i, d := range []string{"shop1", "shop2", "shop1"} {
		m := catalogtest.Write(t, store, catalogtest.Items, d, "p"+string(rune('a'+i)), []catalogtest.Row{
			catalogtest.Ins(uint64(10+i), 1, map[string]any{"id": int64(1), "tenant": d, "name": "n"}),
		})
		ref, err := catalog.ReadRef(ctx, store, m.Path())
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	if _, err := c.Index(ctx, store, refs); err != nil {
		t.Fatal(err)
	}
	l, err := c.AcquireLease(ctx, "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Publish(ctx, l, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	l = res.Lease
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := httpx.New("127.0.0.1:0", "", prometheus.NewRegistry(), log)
	api.Register(h, api.Deps{Log: log, States: states, Reads: api.CatalogReads{C: c}})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	run := func(args ...string) (string, int) {
		t.Helper()
		var code int
		out := stdout(t, func() {
			code = Main(append([]string{"--server", srv.URL, "--config", "/nonexistent/sluice.yaml"}, args...))
		})
		return out, code
	}
	if _, code := run("destinations", "purge", "shop1"); code != 2 {
		t.Fatalf("purge without --yes: exit %d, want 2", code)
	}
	if _, code := run("destinations", "purge", "shop1", "--yes"); code == 0 {
		t.Fatal("purge of an active destination exited 0")
	}
	if _, err := states.Set(ctx, "shop1", state.Retired, "gone"); err != nil {
		t.Fatal(err)
	}
	// The publisher's lifecycle tick.
	go func() {
		for ctx.Err() == nil {
			if l2, err := c.RunPurges(ctx, l, time.Minute, store, "purge1"); err == nil {
				l = l2
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	out, code := run("destinations", "purge", "shop1", "--yes", "--json", "--timeout", "2m")
	var st api.PurgeStatus
	if code != 0 || json.Unmarshal([]byte(strings.TrimSpace(out)), &st) != nil || !st.Done {
		t.Fatalf("purge: exit %d, %q", code, out)
	}
}
