package catalog_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/catalog/chdb"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// The kill -9 tests run the catalog in a child process (this test binary,
// TestLifecycleCrashChild) over a chDB directory and a pack directory of
// the parent's: the first child indexes a history, publishes it, records
// its reads and starts a compaction or a GC pass that it stops at a
// chosen point (a test hook prints "KILLME" and waits), where the parent
// kills it with SIGKILL; a second child over the same directories checks
// that every retained snapshot reads as the history did, then compacts and
// collects garbage to the end and checks again, and that the store holds
// no file the catalog does not reference.

const crashEnv = "SLUICE_LIFECYCLE_CRASH"

var crashDests = []string{"shopA", "shopB"}

func TestKillDuringCompactionAndGC(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	for _, point := range []string{"compact-stored", "compact-indexed", "gc-files", "gc-rows"} {
		t.Run(point, func(t *testing.T) {
			dir := t.TempDir()
			child := func(phase string, killAt bool) {
				t.Helper()
				cmd := exec.Command(os.Args[0], "-test.run=^TestLifecycleCrashChild$", "-test.count=1", "-test.v")
				cmd.Env = append(os.Environ(), crashEnv+"="+phase+":"+point+":"+dir)
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stderr = cmd.Stdout
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				var log strings.Builder
				sc := bufio.NewScanner(out)
				killed := false
				for sc.Scan() {
					line := sc.Text()
					log.WriteString(line + "\n")
					if killAt && strings.Contains(line, "KILLME") {
						if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
							t.Fatal(err)
						}
						killed = true
					}
				}
				err = cmd.Wait()
				switch {
				case killAt && !killed:
					t.Fatalf("%s: the child never reached %s:\n%s", phase, point, log.String())
				case !killAt && err != nil:
					t.Fatalf("%s: %v\n%s", phase, err, log.String())
				}
			}
			child("crash", true)
			child("verify", false)
		})
	}
}

// TestLifecycleCrashChild is the child of TestKillDuringCompactionAndGC
// (it does nothing without crashEnv).
func TestLifecycleCrashChild(t *testing.T) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		t.Skip("only as the child of TestKillDuringCompactionAndGC")
	}
	parts := strings.SplitN(spec, ":", 3)
	phase, point, dir := parts[0], parts[1], parts[2]
	conn, err := chdb.Open(filepath.Join(dir, "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(filepath.Join(dir, "store"), "s1")
	if err != nil {
		t.Fatal(err)
	}
	c := catalog.New(conn, catalog.Options{Prefix: "sluice", GCGrace: time.Millisecond})
	if err := c.EnsureSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantFile := filepath.Join(dir, "want.json")
	readAllDests := func(v uint64) map[string][]map[string]any {
		out := map[string][]map[string]any{}
		for _, d := range crashDests {
			out[d] = withoutIdentity(readAll(t, c, d, catalogtest.Items.Name, v, 7, true))
		}
		return out
	}
	stop := func() {
		fmt.Println("KILLME")
		time.Sleep(time.Hour)
	}
	var l catalog.Lease
	switch phase {
	case "crash":
		index(t, c, store, history(t, store, rand.New(rand.NewPCG(5, 6)), crashDests, 9)...)
		lpublish(t, c, &l)
		b, _ := json.Marshal(readAllDests(0))
		if err := os.WriteFile(wantFile, b, 0o644); err != nil {
			t.Fatal(err)
		}
		switch point {
		case "compact-stored":
			catalog.SetLifecycleHooks(stop, nil, nil, nil)
		case "compact-indexed":
			catalog.SetLifecycleHooks(nil, stop, nil, nil)
		case "gc-files":
			catalog.SetLifecycleHooks(nil, nil, stop, nil)
		case "gc-rows":
			catalog.SetLifecycleHooks(nil, nil, nil, stop)
		}
		if _, l2, err := c.Compact(t.Context(), l, lifeTTL, store, policy, "compact1"); err != nil {
			t.Fatal(err)
		} else {
			l = l2
		}
		crashExpire(t, c, &l)
		if _, err := c.CollectGarbage(t.Context(), store, catalog.GCOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Fatal("the hook did not stop the child")
	case "verify":
		raw, err := os.ReadFile(wantFile)
		if err != nil {
			t.Fatal(err)
		}
		var want map[string][]map[string]any
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		norm := func(m map[string][]map[string]any) string { b, _ := json.Marshal(m); return string(b) }
		check := func(when string) {
			snaps, err := c.Snapshots(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range snaps {
				if got := readAllDests(s.Version); norm(got) != norm(want) {
					t.Fatalf("%s: snapshot %d reads differently:\n got %v\nwant %v", when, s.Version, got, want)
				}
			}
		}
		check("after the kill")
		// What the indexer's reconciler does: a file in the store without
		// an inventory row (a compacted segment stored before the kill) is
		// indexed; the next publish admits it beside the members it copies,
		// and every snapshot still reads the same.
		inv, err := c.Inventory(t.Context(), store.ID())
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range storePaths(t, store) {
			if !inv[f] {
				ref, err := catalog.ReadRef(t.Context(), store, f)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Index(t.Context(), store, []catalog.PackRef{ref}); err != nil {
					t.Fatal(err)
				}
				t.Logf("re-indexed %s", f)
			}
		}
		lpublish(t, c, &l)
		check("after the reconciler and a publish")
		if _, l2, err := c.Compact(t.Context(), l, lifeTTL, store, policy, "compact2"); err != nil {
			t.Fatal(err)
		} else {
			l = l2
		}
		crashExpire(t, c, &l)
		if _, err := c.CollectGarbage(t.Context(), store, catalog.GCOptions{}); err != nil {
			t.Fatal(err)
		}
		check("after compaction and GC ran to the end")
		inv, err = c.Inventory(t.Context(), store.ID())
		if err != nil {
			t.Fatal(err)
		}
		files := storePaths(t, store)
		for _, f := range files {
			if !inv[f] {
				t.Fatalf("store holds %s, which no inventory row references", f)
			}
		}
		if len(files) == 0 {
			t.Fatal("store holds nothing")
		}
	}
}

// storePaths lists every pack and segment of store.
func storePaths(t *testing.T, store packstore.Store) []string {
	t.Helper()
	var files []string
	err := store.List(t.Context(), "", func(p string) error { files = append(files, p); return nil })
	if err == nil {
		err = store.List(t.Context(), ".seg/", func(p string) error { files = append(files, p); return nil })
	}
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// crashExpire publishes and advances the expiry horizon to the latest.
func crashExpire(t *testing.T, c *catalog.Catalog, l *catalog.Lease) {
	t.Helper()
	lpublish(t, c, l)
	if _, err := c.AdvanceRetention(t.Context(), *l, catalog.RetentionPolicy{Retention: time.Microsecond, RetainMin: 1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
}
