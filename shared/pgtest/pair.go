package pgtest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/shared/pgcluster"
)

// NeedBinaries returns the folder of server binaries find names (e.g. a
// pgcluster.BinDirAtLeast): without them the test fails when CI is set and
// skips otherwise, saying how to get them (make pg-bins).
func NeedBinaries(t testing.TB, find func() (string, error)) string {
	t.Helper()
	bindir, err := find()
	if err != nil {
		msg := fmt.Sprintf("%v: run make pg-bins (deploy/fetch-postgres.sh)", err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bindir
}

// PairOptions configure Pair.
type PairOptions struct {
	BinDir string // the server binaries ("": pgcluster's default)
	// Primary and Standby are settings added to Settings on each.
	Primary, Standby map[string]string
	// Databases are created on the primary before the standby is copied
	// from it.
	Databases []string
	// Slot, DB and SyncSlots are the standby's (pgcluster.StandbyOptions).
	Slot, DB  string
	SyncSlots bool
}

// Pair starts a primary and a hot standby streaming from it
// (pgcluster.StartStandby: hot_standby_feedback on), clusters of the
// test's own in a fresh folder, each killed at cleanup and by a watchdog
// if the test binary dies.
func Pair(t testing.TB, o PairOptions) (primary, standby *pgcluster.Cluster) {
	t.Helper()
	root := tempRoot(t, "sluice-pgtest-pair-")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := own(ctx, t, pgcluster.Options{Dir: filepath.Join(root, "primary"), BinDir: o.BinDir, Settings: with(o.Primary)})
	for _, db := range o.Databases {
		if err := p.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	s, err := pgcluster.StartStandby(ctx, p, pgcluster.StandbyOptions{
		Options: pgcluster.Options{Dir: filepath.Join(root, "standby"), Settings: with(o.Standby)},
		Slot:    o.Slot, DB: o.DB, SyncSlots: o.SyncSlots})
	if err != nil {
		t.Fatal(err)
	}
	watch(t, s)
	return p, s
}

// Own starts a cluster of the test's own from bindir ("": pgcluster's
// default) with Settings and extra, killed at cleanup and by a watchdog if
// the test binary dies.
func Own(t testing.TB, bindir string, extra map[string]string) *pgcluster.Cluster {
	t.Helper()
	root := tempRoot(t, "sluice-pgtest-own-")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return own(ctx, t, pgcluster.Options{Dir: filepath.Join(root, "data"), BinDir: bindir, Settings: with(extra)})
}

// tempRoot is a fresh folder for a test's own clusters, removed at cleanup.
func tempRoot(t testing.TB, prefix string) string {
	t.Helper()
	root, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	// The server runs as user postgres when we are root: let it reach its dir.
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	return root
}

func own(ctx context.Context, t testing.TB, o pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	watch(t, c)
	return c
}

func watch(t testing.TB, c *pgcluster.Cluster) {
	t.Helper()
	t.Cleanup(func() { _ = c.Kill() })
	if err := c.Watchdog(os.Getpid(), ""); err != nil {
		t.Fatal(err)
	}
}

// with is Settings with extra added.
func with(extra map[string]string) map[string]string {
	out := maps.Clone(Settings)
	maps.Copy(out, extra)
	return out
}
