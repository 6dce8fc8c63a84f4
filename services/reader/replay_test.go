package reader

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/reader/internal/capture"
)

// A large transaction streams in chunks (never held whole), and a session
// that replays it after a crash cuts the same batches: the same
// Nats-Msg-Ids, so JetStream stores every row exactly once.
func TestLargeTxChunksReplayIdentically(t *testing.T) {
	e := newEnv(t, "public.items")
	e.cfg.Reader.BatchRows = 100
	e.exec(schemaSQL)
	var n atomic.Int64
	hook := func(real capture.PublishFunc) capture.PublishFunc {
		return func(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
			if msg.Subject != proto.SubjectTick && n.Add(1) == 40 {
				return stuckFuture{msg}, nil // never acked: the transaction is not confirmed
			}
			return real(msg) // unchained, so the later batches are stored too
		}
	}
	run := e.start(e.newReader("a", func(r *Reader) { r.publishHook = hook }))
	waitStreaming(t, run)
	e.exec(`INSERT INTO items SELECT 't', g, 'v' FROM generate_series(1, 5000) g`)
	waitRows(t, e, 4900) // every batch but the withheld one
	e.kill(run)
	run2 := e.start(e.newReader("a", nil))
	waitStreaming(t, run2)
	waitRows(t, e, 5000)
	eventually(t, 10*time.Second, func() error {
		if run2.r.Status().Rows["public.items"] < 5000 {
			return fmt.Errorf("replay not finished")
		}
		return nil
	})
	rows, ticks, msgs := e.changes()
	if len(rows) != 5000 {
		t.Errorf("%d rows stored, want each of 5000 exactly once", len(rows))
	}
	// The stream also holds the idle ticks a reader publishes when it waits
	// long enough between changes (on a loaded machine, before the insert
	// arrives or after the replay): they are not batches.
	if n := len(msgs) - len(ticks); n != 50 {
		t.Errorf("%d data messages (and %d ticks), want 50 batches of 100", n, len(ticks))
	}
	seqs := map[uint64]bool{}
	for _, r := range rows {
		if r.pos.LSN != rows[0].pos.LSN {
			t.Fatalf("row at %s outside the transaction", r.pos)
		}
		seqs[r.pos.Seq] = true
	}
	for i := uint64(1); i <= 5000; i++ {
		if !seqs[i] {
			t.Fatalf("seq %d missing", i)
		}
	}
}
