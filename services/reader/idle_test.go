package reader

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
)

// A source whose writes are all filtered (tables not captured) still lets
// the slot advance: with nothing pending the reader confirms the server's
// position from keepalives and publishes it as a tick, so the slot retains
// no WAL for it and the pipeline's frontier reaches it.
func TestIdleFilteredSourceAdvances(t *testing.T) {
	e := newEnv(t, "public.items")
	e.exec(schemaSQL + `CREATE TABLE noise (id int)`)
	run := e.start(e.newReader("a", nil))
	waitStreaming(t, run)
	e.exec(`INSERT INTO noise SELECT generate_series(1, 20000)`)
	target := currentLSN(t, e.dsn)
	eventually(t, 20*time.Second, func() error {
		c, _ := proto.ParseLSN(run.r.Status().ConfirmedLSN)
		if c < target {
			return fmt.Errorf("confirmed %s, WAL written to %s", c, target)
		}
		return nil
	})
	_, ticks, _ := e.changes()
	if len(ticks) == 0 || ticks[len(ticks)-1] < target {
		t.Errorf("ticks %v, want one at or past %s", ticks, target)
	}
	// The slot itself moved: Postgres may recycle that WAL.
	pool := e.statePool()
	defer pool.Close()
	eventually(t, 10*time.Second, func() error {
		var s string
		if err := pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.cfg.Source.Slot).Scan(&s); err != nil {
			return err
		}
		if l, _ := proto.ParseLSN(s); l < target {
			return fmt.Errorf("slot confirmed_flush_lsn %s < %s", l, target)
		}
		return nil
	})
	// A data message afterwards carries a Through at or past the tick.
	e.exec(`INSERT INTO items VALUES ('t', 1, 'x', 1)`)
	waitRows(t, e, 1)
	_, _, msgs := e.changes()
	last := msgs[len(msgs)-1]
	if th, _ := proto.ParseLSN(last.Header.Get(proto.HeaderThrough)); th < target {
		t.Errorf("data message Sluice-Through %s below the confirmed tick %s", th, target)
	}
}
