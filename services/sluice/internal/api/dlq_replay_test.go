package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/router"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// chainedPublisher publishes to CHANGES the way the reader does: each
// message names the one before it (Nats-Expected-Last-Msg-Id), so a
// message from anyone else in the stream fails its next publish.
type chainedPublisher struct {
	js   jetstream.JetStream
	last uint64 // the stream sequence of its last publish (the reader's chain)
}

func (p *chainedPublisher) publish(ctx context.Context, t *testing.T, rows []packstoretest.Row) (string, error) {
	t.Helper()
	rec := packstoretest.Batch(memory.NewGoAllocator(), rows)
	defer rec.Release()
	body, err := arrowcodec.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	first := proto.Position{LSN: proto.LSN(rows[0].LSN), Seq: rows[0].Seq}
	last := proto.Position{LSN: proto.LSN(rows[len(rows)-1].LSN), Seq: rows[len(rows)-1].Seq}
	id := proto.ChangesMsgID("public.items", first, last)
	msg := nats.NewMsg(proto.ChangesSubject("public.items"))
	msg.Header.Set(proto.HeaderWire, proto.WireVersion)
	msg.Header.Set(proto.HeaderTable, "public.items")
	msg.Header.Set(proto.HeaderSchema, arrowcodec.Fingerprint(rec.Schema()))
	msg.Header.Set(proto.HeaderFirst, first.String())
	msg.Header.Set(proto.HeaderLast, last.String())
	msg.Data = body
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(id)}
	if p.last != 0 {
		opts = append(opts, jetstream.WithExpectLastSequence(p.last))
	}
	ack, err := p.js.PublishMsg(ctx, msg, opts...)
	if err != nil {
		return id, err
	}
	p.last = ack.Sequence
	return id, nil
}

// runRouter runs a real router with destinations.list list until the
// returned stop is called.
func runRouter(t *testing.T, js jetstream.JetStream, list map[string]string) (stop func()) {
	t.Helper()
	cfg := config.Default()
	cfg.NATS.MaxPayload = testMaxPayload
	cfg.NATS.MaxBytes = 64 << 20
	cfg.Delivery.Partitions = 2
	cfg.Destinations.Mode, cfg.Destinations.List, cfg.Destinations.Unlisted = "list", list, "dlq"
	r, err := router.New(cfg, router.Deps{JS: js, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	}
}

// routedTo waits for the first ROUTED message (a partition message) that
// carries rows of destination dest and returns its headers.
func routedTo(t *testing.T, js jetstream.JetStream, dest string) nats.Header {
	t.Helper()
	ctx := context.Background()
	subject := proto.RoutedPartitionSubject(proto.Partition(dest, 2))
	cons, err := js.OrderedConsumer(ctx, proto.StreamRouted, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Fatalf("no ROUTED message for %s: %v", dest, err)
		}
		rec, err := arrowcodec.Decode(m.Data(), nil)
		if err != nil {
			t.Fatalf("decoding a ROUTED message: %v", err)
		}
		runs, _, err := proto.DestinationRuns(rec)
		rec.Release()
		if err != nil {
			t.Fatalf("a ROUTED message's destinations: %v", err)
		}
		for _, r := range runs {
			if r.Destination == dest {
				return m.Headers()
			}
		}
	}
}

// A router dead letter replayed while the reader keeps publishing: the
// reader's chain holds (its next publish is stored), and the router routes
// the replayed rows, at their own positions, once the configuration names
// their destination. Real JetStream, real router; the reader's chain is
// JetStream's Nats-Expected-Last-Msg-Id check, as the reader uses it. The
// negative control replays into CHANGES, as replay did before REPLAY
// existed: the reader's next publish is refused.
func TestDLQReplayKeepsTheReaderChain(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct {
		name     string
		toOrigin bool
	}{{"replay to REPLAY", false}, {"negative control: replay to CHANGES", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newDLQEnv(t)
			ctx := context.Background()
			reader := &chainedPublisher{js: e.js}

			// shop2 is not listed yet: its rows are dead-lettered.
			stop := runRouter(t, e.js, map[string]string{"shop1": "shop1"})
			if _, err := reader.publish(ctx, t, []packstoretest.Row{
				{ID: 1, Tenant: "shop1", Op: proto.OpInsert, LSN: 100, Seq: 1},
				{ID: 2, Tenant: "shop2", Note: packstoretest.Str("old"), Op: proto.OpInsert, LSN: 100, Seq: 2},
			}); err != nil {
				t.Fatal(err)
			}
			routedTo(t, e.js, "shop1")
			d := NewDLQ(e.js)
			d.replayToOrigin = tc.toOrigin
			var dead []DLQEntry
			for deadline := time.Now().Add(30 * time.Second); len(dead) == 0; {
				var err error
				if dead, err = d.List(ctx, "router", 0); err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatal("no router dead letter")
				}
				time.Sleep(20 * time.Millisecond)
			}
			stop()

			res, err := d.Replay(ctx, dead[0].Seq)
			if err != nil {
				t.Fatal(err)
			}
			// The reader goes on: its next publish names its own last one.
			_, err = reader.publish(ctx, t, []packstoretest.Row{
				{ID: 3, Tenant: "shop1", Op: proto.OpInsert, LSN: 200, Seq: 1},
			})
			if tc.toOrigin {
				var apiErr *jetstream.APIError
				if res.Stream != proto.StreamChanges || !errors.As(err, &apiErr) {
					t.Fatalf("replayed to %s, reader publish: %v; want the chain broken", res.Stream, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("the reader's publish after a replay: %v", err)
			}
			if res.Stream != proto.StreamReplay || res.Subject != "sluice.replay.changes.public.items" {
				t.Fatalf("replay: %+v", res)
			}

			// Listed now: the replayed rows reach shop2 with the positions
			// they had (apply is by position, so they never override a
			// newer version of their rows).
			stop = runRouter(t, e.js, map[string]string{"shop1": "shop1", "shop2": "shop2"})
			defer stop()
			h := routedTo(t, e.js, "shop2")
			want := proto.Position{LSN: 100, Seq: 2}.String()
			if h.Get(proto.HeaderFirst) != want || h.Get(proto.HeaderLast) != want || h.Get(proto.HeaderMsgID) != proto.PartitionMsgID(ReplayMsgID(dead[0].Seq), proto.Partition("shop2", 2)) {
				t.Fatalf("replayed rows routed with %v; want first = last = %s, id from replay:%d", h, want, dead[0].Seq)
			}
			// The router acked the replay: REPLAY is a work queue.
			for deadline := time.Now().Add(30 * time.Second); streamMsgs(t, e.js, proto.StreamReplay) != 0; {
				if time.Now().After(deadline) {
					t.Fatal("REPLAY still holds the replayed message")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
