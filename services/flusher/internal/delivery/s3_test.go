package delivery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	cfgpkg "github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// startS3 opens a store on a real S3-compatible server (versitygw, as
// shared/packstore's S3 tests use) for the life of the test.
func startS3(t testing.TB) *packstore.S3Store {
	t.Helper()
	return pt.StartS3Server(t).Open(t, "packs")
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
