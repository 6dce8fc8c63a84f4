package cli

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/shared/pgtest"
)

// TestSlotRetainedWAL creates a logical slot on a real Postgres, makes the
// server write WAL the slot must keep, and checks `sluice slot`: the
// retained bytes, the warning over --warn and its exit code 1, and no
// warning under the threshold (the negative control: the same slot with the
// threshold above what it retains).
func TestSlotRetainedWAL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Postgres")
	}
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot('sluice', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}

	slots, err := QuerySlots(ctx, dsn, "sluice", 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) != 1 {
		t.Fatalf("got %d slots", len(slots))
	}
	s := slots[0]
	if s.Name != "sluice" || s.Plugin != "pgoutput" || s.Type != "logical" || s.Active || s.RestartLSN == "" || s.CurrentLSN == "" {
		t.Fatalf("slot %+v", s)
	}
	if s.RetainedBytes < 1<<20 || !s.OverWarn {
		t.Fatalf("retained %d bytes (over 64KiB: %t), want at least 1MiB and a warning", s.RetainedBytes, s.OverWarn)
	}
	if s.UnconfirmedBytes == nil || *s.UnconfirmedBytes <= 0 {
		t.Fatalf("unconfirmed %v", s.UnconfirmedBytes)
	}
	// Negative control: a threshold above what the slot retains warns of nothing.
	quiet, err := QuerySlots(ctx, dsn, "sluice", s.RetainedBytes*100)
	if err != nil || quiet[0].OverWarn {
		t.Fatalf("warned under the threshold: %+v %v", quiet, err)
	}

	run := func(args ...string) error {
		root := newRoot()
		root.SetArgs(append([]string{"--config", t.TempDir() + "/none.yaml", "slot", "--dsn", dsn}, args...))
		return root.ExecuteContext(ctx)
	}
	var ee *exitError
	if err := run("--warn", "64KiB"); !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), "retains more than 64.0KiB") {
		t.Fatalf("over --warn: got %v, want exit 1 naming the threshold", err)
	}
	if err := run("--warn", "1TiB"); err != nil {
		t.Fatalf("under --warn: %v", err)
	}
	if err := run("--slot", "nope"); !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing slot: %v", err)
	}
	if err := run("--warn", "lots"); !errors.As(err, &ee) || ee.code != 2 {
		t.Fatalf("bad --warn: %v", err)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1.0KiB", 1536: "1.5KiB", 1 << 30: "1.0GiB", 5 << 40: "5.0TiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %s, want %s", n, got, want)
		}
	}
}
