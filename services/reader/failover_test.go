package reader

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/services/reader/internal/source"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/pgcluster"
	"github.com/sluice-cdc/sluice/shared/pgtest"
)

// TestSlotFailoverOn17: on Postgres 17 (a cluster of its own; the test
// fails without the binaries) the reader creates its slot with failover on,
// and turns it on for an existing slot that has it off (ALTER_REPLICATION_SLOT).
// Its negative control is the rule switch noSlotFailover: neither happens.
func TestSlotFailoverOn17(t *testing.T) {
	bindir, err := pgcluster.BinDirAtLeast(source.FailoverVersion)
	if err != nil {
		t.Fatal(err)
	}
	c := pgtest.Own(t, bindir, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := c.DSN("postgres")
	src, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	failover := func(slot string) bool {
		t.Helper()
		var on bool
		if err := src.QueryRow(ctx, `SELECT failover FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&on); err != nil {
			t.Fatal(err)
		}
		return on
	}
	for _, tc := range []struct {
		name string
		off  bool // the negative control: rules.noSlotFailover
	}{{"on", false}, {"control", true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Source.DSN, cfg.Source.Slot = dsn, "fo_"+tc.name
			r := &Reader{cfg: cfg, log: slog.Default(), rules: rules{noSlotFailover: tc.off}}
			conn, err := r.replicationConn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.createSlot(ctx, conn, source.FailoverVersion, cfg.Source.Slot, false, false); err != nil {
				t.Fatal(err)
			}
			conn.Close(ctx)
			if got := failover(cfg.Source.Slot); got == tc.off {
				t.Fatalf("created slot: failover %v", got)
			}
			// An existing slot without failover (an older sluice made it).
			if _, err := src.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, cfg.Source.Slot); err != nil {
				t.Fatal(err)
			}
			if _, err := src.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, cfg.Source.Slot); err != nil {
				t.Fatal(err)
			}
			r.ensureFailover(ctx, src)
			if got := failover(cfg.Source.Slot); got == tc.off {
				t.Fatalf("existing slot after ensureFailover: failover %v", got)
			}
			f, err := source.CheckFailover(ctx, src, cfg.Source.Slot)
			if err != nil {
				t.Fatal(err)
			}
			if f.Possible || f.SlotFailover == tc.off || len(f.Why) == 0 {
				t.Fatalf("failover check of a server without standbys: %+v", f)
			}
			t.Logf("failover check: %q", f.Why)
		})
	}
}

// TestStandbyDSNRefused: a source.dsn that reaches a standby is refused
// with a message that says what to set, before anything tries to write to
// it; the same check passes on the primary (its control).
func TestStandbyDSNRefused(t *testing.T) {
	p, s := pgtest.Pair(t, pgtest.PairOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name    string
		dsn     string
		refused bool
	}{{"standby", s.DSN("postgres"), true}, {"primary", p.DSN("postgres"), false}} {
		pool, err := pgxpool.New(ctx, tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		ver, err := source.ReadServerVersion(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		_, err = source.CheckRole(ctx, pool, ver, nil)
		pool.Close()
		if got := errors.Is(err, source.ErrInvalidSource); got != tc.refused {
			t.Fatalf("%s: CheckRole = %v", tc.name, err)
		}
		if tc.refused && !strings.Contains(err.Error(), "target_session_attrs=read-write") {
			t.Fatalf("%s: the error does not say what to set: %v", tc.name, err)
		}
	}
}
