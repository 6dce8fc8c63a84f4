package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/shared/pgtest"
	"github.com/sluice-cdc/sluice/shared/state"
	"github.com/sluice-cdc/sluice/test/kit"
)

// resyncs reads `sluice resync --list --json`.
func (s *sluice) resyncs() []state.Resync {
	s.t.Helper()
	out, err := s.cli("resync", "--list", "--json")
	if err != nil {
		s.t.Fatalf("%v\n%s", err, s.tail())
	}
	var rs []state.Resync
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		s.t.Fatalf("decoding %q: %v", out, err)
	}
	return rs
}

func (s *sluice) resync(id int64) state.Resync {
	s.t.Helper()
	for _, r := range s.resyncs() {
		if r.ID == id {
			return r
		}
	}
	s.t.Fatalf("resync %d not listed", id)
	return state.Resync{}
}

// startResync queues a resync through the CLI and returns its id.
func (s *sluice) startResync(args ...string) int64 {
	s.t.Helper()
	out, err := s.cli(append([]string{"resync", "--json"}, args...)...)
	if err != nil {
		s.t.Fatalf("%v\n%s", err, s.tail())
	}
	var r state.Resync
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		s.t.Fatalf("decoding %q: %v", out, err)
	}
	return r.ID
}

// divergedUnderLoad makes sluice's copy of public.rs_items diverge from
// src (diverge: rows deleted and changed where the stream never says so),
// checks that the oracle sees it, and starts the load on src; stop ends the
// load and waits for it (once; later calls do nothing).
func divergedUnderLoad(ctx context.Context, t *testing.T, src *pg, s *sluice) (stop func()) {
	t.Helper()
	diverge(src, "public.rs_items",
		`DELETE FROM public.rs_items WHERE id % 37 = 0`,
		`UPDATE public.rs_items SET v = -v WHERE id % 41 = 0`)
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, diffs := oracle(t, src, s, "public.rs_items", []string{"tenant_id", "id"}); len(diffs) == 0 {
		t.Fatal("the copy did not diverge: the resync would prove nothing")
	}
	pool, err := pgxpool.New(ctx, src.dsn)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go load(lctx, t, pool, &wg)
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait(); pool.Close() }) }
}

// killDuringResync kills sluice with SIGKILL once resync id has published
// at least chunks chunks, starts it again, and returns the chunks it had;
// the test fails if the resync finishes first.
func (s *sluice) killDuringResync(id, chunks int64) int64 {
	s.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		r := s.resync(id)
		if r.State == state.ResyncDone {
			s.t.Fatalf("the resync finished before the kill (chunks %d): make the chunks smaller", r.Chunks)
		}
		if r.Chunks >= chunks {
			s.dev.P.Kill()
			s.start()
			return r.Chunks
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("resync at %d chunks after 3 minutes\n%s", r.Chunks, s.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitResyncDone waits until resync id is done (5 minutes at most); a
// failed one fails the test.
func (s *sluice) waitResyncDone(id int64) state.Resync {
	s.t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		done := s.resync(id)
		if done.State == state.ResyncFailed {
			s.t.Fatalf("resync failed: %s\n%s", done.Error, s.tail())
		}
		if done.State == state.ResyncDone {
			return done
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("resync not done: %+v\n%s", done, s.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// diverge makes the pipeline's copy of table differ from the source
// without the stream saying so: the table leaves the publication, rows are
// deleted and changed, and it joins again (pgoutput decodes each change with
// the publication as of that change, so these are never sent). All in one
// transaction: the reader's periodic publication check, which repairs a
// publication sluice created (and resyncs the table), sees the table in it
// before and after, never the gap — run as separate statements, a check
// between them re-added the table and the ADD failed.
func diverge(src *pg, table string, deletes, updates string) {
	pub := src.strings(`SELECT pubname FROM pg_publication`)[0]
	src.exec(`BEGIN; ALTER PUBLICATION ` + pub + ` DROP TABLE ` + table + `; ` + deletes + `; ` + updates +
		`; ALTER PUBLICATION ` + pub + ` ADD TABLE ` + table + `; COMMIT`)
}

// load writes to public.rs_items until ctx ends: inserts, updates and
// deletes over every tenant.
func load(ctx context.Context, t *testing.T, pool *pgxpool.Pool, wg *sync.WaitGroup) {
	defer wg.Done()
	r := rand.New(rand.NewPCG(3, 4))
	next := int64(1_000_000)
	for ctx.Err() == nil {
		tenant := fmt.Sprintf("t%d", r.IntN(20))
		var err error
		switch r.IntN(3) {
		case 0:
			next++
			_, err = pool.Exec(ctx, `INSERT INTO public.rs_items VALUES ($1, $2, 0)`, tenant, next)
		case 1:
			_, err = pool.Exec(ctx, `UPDATE public.rs_items SET v = v + 1 WHERE tenant_id = $1 AND id = $2`, tenant, r.Int64N(20000)+1)
		default:
			_, err = pool.Exec(ctx, `DELETE FROM public.rs_items WHERE tenant_id = $1 AND id = $2`, tenant, r.Int64N(20000)+1)
		}
		if err != nil && ctx.Err() == nil {
			t.Errorf("load: %v", err)
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestResyncUnderLoadKilledTwice: a table whose copy diverged from the
// source (rows deleted and changed where the stream never said so) is
// resynced while a steady load writes to it, and `sluice dev` is killed
// with SIGKILL twice midway; the resync continues from its last chunk each
// time and ends with every tenant's copy equal to the source (oracle):
// re-copied, the stream's changes kept, the deleted rows cleared.
func TestResyncUnderLoadKilledTwice(t *testing.T) {
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.rs_items (tenant_id text NOT NULL, id bigint NOT NULL, v bigint NOT NULL, PRIMARY KEY (tenant_id, id));
		INSERT INTO public.rs_items SELECT 't' || (g % 20), g, g FROM generate_series(1, 20000) g; ANALYZE public.rs_items;`)
	s, ctx := startLive(t, src, []string{"public.rs_items"}, "SLUICE_SOURCE_RESYNC_CHUNK_ROWS=200")
	stopLoad := divergedUnderLoad(ctx, t, src, s)
	defer stopLoad()

	id := s.startResync("--table", "public.rs_items")
	for kill := 1; kill <= 2; kill++ {
		// Killed midway: once some chunks more are published.
		at := s.killDuringResync(id, int64(10*kill))
		t.Logf("kill %d at chunk %d", kill, at)
	}
	done := s.waitResyncDone(id)
	t.Logf("resync: %d rows in %d chunks, %d left to the stream, end %s", done.Rows, done.Chunks, done.Dropped, done.EndLSN)
	stopLoad()
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if rows, diffs := oracle(t, src, s, "public.rs_items", []string{"tenant_id", "id"}); len(diffs) > 0 {
		t.Fatalf("after the resync, %d rows checked, %d differences:\n%s", rows, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
}

// packIDs lists the newest packs of a destination.
func packIDs(t *testing.T, server, dest string) map[string]bool {
	t.Helper()
	resp, err := http.Get(server + "/api/v1/packs?limit=1000&destination=" + url.QueryEscape(dest))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Packs []struct {
			PackID string `json:"pack_id"`
		} `json:"packs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, k := range p.Packs {
		out[k.PackID] = true
	}
	return out
}

// TestResyncOneTenant: a per-destination resync re-copies one tenant's
// rows (and clears only its deleted ones): no other tenant's inventory gets
// a pack, and every tenant ends equal to the source.
func TestResyncOneTenant(t *testing.T) {
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.rs_items (tenant_id text NOT NULL, id bigint NOT NULL, v bigint NOT NULL, PRIMARY KEY (tenant_id, id));
		INSERT INTO public.rs_items SELECT 't' || (g % 5), g, g FROM generate_series(1, 5000) g; ANALYZE public.rs_items;`)
	s, ctx := startLive(t, src, []string{"public.rs_items"}, "SLUICE_SOURCE_RESYNC_CHUNK_ROWS=300")
	diverge(src, "public.rs_items",
		`DELETE FROM public.rs_items WHERE tenant_id = 't3' AND id % 10 = 3`,
		`UPDATE public.rs_items SET v = -v WHERE tenant_id = 't3' AND id % 7 = 3`)
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	before := map[string]map[string]bool{}
	for i := range 5 {
		d := fmt.Sprintf("t%d", i)
		before[d] = packIDs(t, s.server, d)
	}
	out, err := s.cli("resync", "--table", "public.rs_items", "--value", "t3", "--wait", "--timeout", "5m")
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, s.tail())
	}
	for i := range 5 {
		d := fmt.Sprintf("t%d", i)
		after := packIDs(t, s.server, d)
		added := 0
		for p := range after {
			if !before[d][p] {
				added++
			}
		}
		switch {
		case d == "t3" && added == 0:
			t.Errorf("the resync of t3 wrote no pack of t3")
		case d != "t3" && added > 0:
			t.Errorf("the resync of t3 wrote %d packs of %s", added, d)
		}
	}
	if rows, diffs := oracle(t, src, s, "public.rs_items", []string{"tenant_id", "id"}); len(diffs) > 0 {
		t.Fatalf("after the resync of t3, %d rows checked, %d differences:\n%s", rows, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
}

// TestResyncRecoversHalt: a replica identity without the routing column
// halts the table (its deletes would reach no tenant); rows deleted and
// changed while it is halted are not carried; `sluice status` names the
// command; the identity is set right again (with no change of the table
// after it, so the last Relation the stream saw is still the bad one), and
// one `sluice resync --wait` later the table is not halted, streams, and
// every tenant's copy equals the source.
func TestResyncRecoversHalt(t *testing.T) {
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.rs_items (tenant_id text NOT NULL, id bigint NOT NULL, v int NOT NULL, PRIMARY KEY (tenant_id, id));
		INSERT INTO public.rs_items SELECT 't' || (g % 5), g, g FROM generate_series(1, 3000) g; ANALYZE public.rs_items;`)
	s, ctx := startLive(t, src, []string{"public.rs_items"}, "SLUICE_SOURCE_RESYNC_CHUNK_ROWS=500")
	src.exec(`CREATE UNIQUE INDEX rs_items_id ON public.rs_items (id); ALTER TABLE public.rs_items REPLICA IDENTITY USING INDEX rs_items_id`)
	src.exec(`UPDATE public.rs_items SET v = -v WHERE id % 11 = 0`)
	src.exec(`DELETE FROM public.rs_items WHERE id % 13 = 0`)
	s.awaitHalt("public.rs_items", time.Minute)
	src.exec(`INSERT INTO public.rs_items VALUES ('t1', 100001, 7)`)
	src.exec(`ALTER TABLE public.rs_items REPLICA IDENTITY DEFAULT`)
	resyncRecovers(ctx, t, src, s, "public.rs_items",
		`UPDATE public.rs_items SET v = 424242 WHERE id = 1`,
		`DELETE FROM public.rs_items WHERE id = 2`)
}

// TestResyncWaitOnATerminal: `sluice resync --wait` under a pseudo-terminal
// draws a live progress bar (percent of the estimated rows, rows copied of
// estimated, the rate and the time left) and exits 0 once a published
// snapshot holds the resync.
func TestResyncWaitOnATerminal(t *testing.T) {
	src := &pg{t: t, dsn: pgtest.NewDB(t)}
	src.exec(`CREATE TABLE public.rs_items (tenant_id text NOT NULL, id bigint NOT NULL, v bigint NOT NULL, PRIMARY KEY (tenant_id, id));
		INSERT INTO public.rs_items SELECT 't' || (g % 5), g, g FROM generate_series(1, 20000) g; ANALYZE public.rs_items;`)
	s := newSluice(t, src.dsn, []string{"public.rs_items"}, "SLUICE_SOURCE_RESYNC_CHUNK_ROWS=250")
	defer artifacts(t, s.dev.Dir)
	s.start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := kit.Wait(ctx, s.server, src.lsn(), 3*time.Minute); err != nil {
		t.Fatalf("pipeline never live: %v\n%s", err, s.tail())
	}
	bin, err := kit.SluiceBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "resync", "--table", "public.rs_items", "--wait", "--server", s.server)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { defer close(copied); _, _ = io.Copy(&out, tty) }()
	werr := cmd.Wait()
	<-copied
	tty.Close()
	screen := out.String()
	if werr != nil {
		t.Fatalf("sluice resync --wait: %v\n%s\n%s", werr, screen, s.tail())
	}
	// The bar redraws in place (\r); some frame shows progress under way.
	bar := regexp.MustCompile(`resync 1 public\.rs_items: running, chunk \d+ +\d+% \|[^|]*\| \(\d+/\d+, \d+ rows/s\) \[[^\]]+:[^\]]+\]`)
	if !bar.MatchString(screen) {
		t.Errorf("no progress bar frame with percent, rows of estimated, rate and ETA in:\n%q", screen)
	}
	if !strings.Contains(screen, "resync 1 published: snapshot") || !strings.Contains(screen, "20000 rows copied") {
		t.Errorf("no end lines in:\n%q", screen)
	}
	t.Logf("frames: %d", strings.Count(screen, "\r"))
}
