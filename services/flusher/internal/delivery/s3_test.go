package delivery

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// startS3 runs a real S3-compatible server (versitygw, the binary
// deploy/fetch-s3server.sh builds, as shared/packstore's S3 tests do) for
// the life of the test and opens a store on it.
func startS3(t testing.TB) *packstore.S3Store {
	t.Helper()
	bin := os.Getenv("SLUICE_S3SERVER")
	if bin == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		bin = filepath.Join(cache, "sluice", "bin", "versitygw-v1.8.0")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no S3 server binary at %s: run deploy/fetch-s3server.sh (make test does) or set SLUICE_S3SERVER", bin)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	data, iam := filepath.Join(dir, "data"), filepath.Join(dir, "iam")
	for _, d := range []string{data, iam} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	access, secret := "sluicetest", fmt.Sprintf("sluice-test-secret-%d", time.Now().UnixNano())
	cmd := exec.Command(bin, "--port", addr, "--iam-dir", iam, "posix", data)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+access, "ROOT_SECRET_KEY="+secret)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	waitFor(t, 20*time.Second, "the S3 server answering", func() bool {
		select {
		case <-exited:
			t.Fatalf("S3 server exited: %s", out.String())
		default:
		}
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	st, err := packstore.OpenS3(context.Background(), packstore.S3Options{
		Endpoint: "http://" + addr, Bucket: "packs", Prefix: "run", AccessKey: access, SecretKey: secret, CreateBucket: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// On S3 (no batch write) a group commit writes one segment per table with
// one Put, and the cursors advance only once it is there.
func TestGroupCommitOneSegmentOnS3(t *testing.T) {
	const n = 10
	s3 := startS3(t)
	e := newEnv(t, func(c *cfgpkg.Config) { c.Delivery.Partitions = 1 })
	var g *groupGate
	var v violations
	r := e.start(t, "a", func(m *Manager) {
		g = holdGroup(t, m, n)
		m.store = s3
		m.afterAdvance = func(d string, pos proto.Position) {
			if len(s3Files(t, s3)) == 0 {
				v.mu.Lock()
				v.errs = append(v.errs, fmt.Errorf("cursor of %s written at %s before any segment is in S3", d, pos))
				v.mu.Unlock()
			}
		}
	})
	dests := groupDests(t, e, r, g)
	waitFor(t, 30*time.Second, "every flush committed", func() bool { return testutilValue(r.m, "ok") == n })
	if errs := v.get(); len(errs) > 0 {
		t.Fatal(errs)
	}
	files := s3Files(t, s3)
	if len(files) != 1 {
		t.Fatalf("%d files in S3 for one group of one table, want 1: %v", len(files), files)
	}
	b, err := s3.Get(e.ctx, files[0])
	if err != nil {
		t.Fatal(err)
	}
	meta, _, err := packstore.VerifyPack(b, packstore.DecodeLimit)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := meta.Entries()
	if err != nil || len(entries) != n {
		t.Fatalf("segment entries %v (%v), want %d", entries, err, n)
	}
	for i, en := range entries {
		if en.Destination != dests[i] || en.Rows != 2 {
			t.Fatalf("entry %d: %+v", i, en)
		}
	}
}

func s3Files(t testing.TB, s *packstore.S3Store) []string {
	var out []string
	if err := s.List(context.Background(), proto.SegmentsDir+"/", func(p string) error {
		out = append(out, p)
		return nil
	}); err != nil {
		t.Errorf("listing S3: %v", err)
	}
	return out
}
