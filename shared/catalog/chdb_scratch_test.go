package catalog

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestScratch(t *testing.T) {
	restoreSignals.Store(false)
	snap := func() map[int]uintptr {
		m := map[int]uintptr{}
		for s := 1; s < 65; s++ {
			if s == 9 || s == 19 {
				continue
			}
			m[s] = signalHandler(unix.Signal(s))
		}
		return m
	}
	diff := func(label string, a, b map[int]uintptr) {
		for s := range a {
			if a[s] != b[s] {
				t.Logf("%s: sig %d (%v) %x -> %x", label, s, unix.SignalName(unix.Signal(s)), a[s], b[s])
			}
		}
	}
	s0 := snap()
	t0 := time.Now()
	if err := loadLibchdb(); err != nil {
		t.Fatal(err)
	}
	t.Logf("dlopen %v", time.Since(t0))
	s1 := snap()
	diff("dlopen", s0, s1)
	t0 = time.Now()
	e, err := acquireEngine(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("connect %v", time.Since(t0))
	s2 := snap()
	diff("connect", s1, s2)
	out, err := e.run("SELECT 1 AS x, 'a' AS y", "JSONCompactEachRowWithNamesAndTypes")
	t.Logf("out=%q err=%v", out, err)
	s3 := snap()
	diff("query", s2, s3)
	out, err = e.run("CREATE DATABASE IF NOT EXISTS d1; USE d1; CREATE TABLE t (a Int64) ENGINE=MergeTree ORDER BY a; INSERT INTO t VALUES (1),(2); SELECT currentDatabase(), count() FROM t", "TSV")
	t.Logf("multi out=%q err=%v", out, err)
	out, err = e.run("SELECT currentDatabase()", "TSV")
	t.Logf("after out=%q err=%v", out, err)
	out, err = e.run("SELECT * FROM nonexist", "TSV")
	t.Logf("err out=%q err=%v", out, err)
	out, err = e.run("SELECT displayName(), version(), revision(), timezone()", "TSV")
	t.Logf("hello out=%q err=%v", out, err)
	out, err = e.run("SELECT 1", "Native")
	t.Logf("native out=%x err=%v", out, err)
	for _, n := range []int{1, 8} {
		t0 = time.Now()
		var wg sync.WaitGroup
		for g := 0; g < n; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					out, err := e.run(fmt.Sprintf("SELECT sum(number) FROM numbers(%d)", 3000000+i), "TSV")
					if err != nil {
						t.Error(err, out)
					}
				}
			}()
		}
		wg.Wait()
		t.Logf("%d goroutines x 20 queries: %v", n, time.Since(t0))
	}
	t0 = time.Now()
	for i := 0; i < 200; i++ {
		e.run("SELECT 1", "Native")
	}
	t.Logf("trivial: %v/query", time.Since(t0)/200)
	e.release()
}
