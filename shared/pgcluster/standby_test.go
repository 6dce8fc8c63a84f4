package pgcluster

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStandbyFailoverSlot: a streaming standby made by StartStandby keeps a
// copy of the primary's failover logical slot (Postgres 17+, which the
// test finds itself and fails without); after KillHard of the primary and
// Promote, the slot is on the new primary, and writes go there.
func TestStandbyFailoverSlot(t *testing.T) {
	bindir, err := BinDirAtLeast(17)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := clusterRoot(t)
	p, err := Start(ctx, Options{Dir: filepath.Join(root, "primary"), BinDir: bindir,
		Settings: map[string]string{"fsync": "off", "synchronized_standby_slots": "sb1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	if err := p.CreateDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	query(t, p.DSN("app"), `SELECT 'x' FROM pg_create_logical_replication_slot('s', 'pgoutput', false, false, true)`)
	s, err := StartStandby(ctx, p, StandbyOptions{Options: Options{Dir: filepath.Join(root, "standby"), Settings: map[string]string{"fsync": "off"}},
		Slot: "sb1", DB: "app", SyncSlots: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Kill() })
	if got := query(t, s.DSN("app"), `SELECT pg_is_in_recovery()::text`); got != "true" {
		t.Fatalf("the standby is not in recovery: %s", got)
	}
	if conn, err := pgx.Connect(ctx, p.DSN("app")); err != nil {
		t.Fatal(err)
	} else if _, err := conn.Exec(ctx, `CREATE TABLE t AS SELECT 1 AS x`); err != nil {
		t.Fatal(err)
	} else {
		conn.Close(ctx)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := query(t, s.DSN("app"), `SELECT coalesce(string_agg(synced::text || '/' || temporary::text, ','), 'none') FROM pg_replication_slots WHERE slot_name = 's'`)
		if got == "true/false" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby never synchronized slot s (synced/temporary: %s); its log:\n%s", got, tail(s.LogPath(), 3000))
		}
		// A synchronized slot is persisted only once the primary's copy has
		// moved past what the standby holds: a consumer confirms.
		query(t, p.DSN("app"), `SELECT pg_log_standby_snapshot()::text`)
		query(t, p.DSN("app"), `SELECT end_lsn::text FROM pg_replication_slot_advance('s', pg_current_wal_lsn())`)
		time.Sleep(200 * time.Millisecond)
	}
	if err := p.KillHard(); err != nil {
		t.Fatal(err)
	}
	if err := s.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if got := query(t, s.DSN("app"), `SELECT failover::text FROM pg_replication_slots WHERE slot_name = 's'`); got != "true" {
		t.Fatalf("slot s after the promotion: failover %s", got)
	}
	query(t, s.DSN("app"), `INSERT INTO t VALUES (2) RETURNING x::text`)
}
