package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/publisher"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// eventually retries f until it returns nil or the deadline passes.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func packEvent(t *testing.T, m packstore.PackMeta, subjectDest string) *nats.Msg {
	return catalogtest.PackEvent(t, m, subjectDest, 0)
}

func pub(t *testing.T, js jetstream.JetStream, msg *nats.Msg) {
	t.Helper()
	if _, err := js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
}

// ackOne fetches one message from cons and acks it.
func ackOne(t *testing.T, cons jetstream.Consumer) {
	t.Helper()
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range b.Messages() {
		if err := m.DoubleAck(t.Context()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("fetched %d messages: %v", n, b.Error())
	}
}

// standInIndexer plays the part of the indexer the publisher reads: on the
// indexer's durable consumer it indexes the packs of the events named in
// sound (by Nats-Msg-Id) and acks them, and terminates every other event.
// What the indexer does with bad packs is its own package's tests
// (services/indexer TestCorruptPackIsDeadLettered,
// TestLyingPackEventIsDeadLettered); here they only must not hold the
// frontier back.
func standInIndexer(ctx context.Context, js jetstream.JetStream, conn catalog.Conn, store packstore.Store, cfg config.Config, sound map[string]packstore.PackMeta) error {
	cat := catalog.New(conn, catalog.Options{Prefix: cfg.Catalog.Prefix})
	if err := cat.EnsureSchema(ctx); err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, proto.StreamPacks, jetstream.ConsumerConfig{
		Durable: proto.ConsumerIndexer, FilterSubject: proto.SubjectPacksAll, AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		b, err := natsx.Fetch(cons, 16, 100*time.Millisecond)
		if err != nil {
			return err
		}
		for msg := range b.Messages() {
			m, ok := sound[msg.Headers().Get(proto.HeaderMsgID)]
			if !ok {
				_ = msg.TermWithReason("not a sound pack")
				continue
			}
			ref, err := catalog.ReadRef(ctx, store, m.Path())
			if err == nil {
				_, err = cat.Index(ctx, store, []catalog.PackRef{ref})
			}
			if err != nil {
				return fmt.Errorf("indexing %s: %w", m.Path(), err)
			}
			if err := msg.DoubleAck(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func TestPublisherOverJetStream(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	cfg := config.Default()
	cfg.Delivery.Partitions = 2
	cfg.Publisher.Interval = 30 * time.Millisecond
	cfg.Publisher.LeaseTTL = 3 * time.Second
	cfg.Indexer.BatchWait = 20 * time.Millisecond
	cfg.Indexer.ReconcileInterval = time.Hour
	// Every snapshot but the newest expires as soon as the publisher looks.
	cfg.Catalog.SnapshotRetention, cfg.Catalog.SnapshotRetainMin = time.Microsecond, 1
	nc, js, err := natsx.Connect(ctx, cfg.NATS, srv.ClientURL(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := natsx.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	// Hand-made consumer states: the router on CHANGES, two flusher partitions on ROUTED.
	mk := func(stream, name, filter string) jetstream.Consumer {
		c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: name, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	router := mk(proto.StreamChanges, proto.ConsumerRouter, proto.SubjectChangesAll)
	fl0 := mk(proto.StreamRouted, proto.ConsumerFlusher(0), proto.RoutedPartitionFilter(0))
	fl1 := mk(proto.StreamRouted, proto.ConsumerFlusher(1), proto.RoutedPartitionFilter(1))
	change := func(through string) {
		h := nats.Header{}
		h.Set(proto.HeaderThrough, through)
		pub(t, js, &nats.Msg{Subject: proto.ChangesSubject("public.items"), Header: h, Data: []byte("x")})
	}
	change("0/100")
	change("0/200")
	pub(t, js, &nats.Msg{Subject: proto.RoutedSubject(0, "shop1"), Data: []byte("r1")})
	pub(t, js, &nats.Msg{Subject: proto.RoutedSubject(1, "shop2"), Data: []byte("r2")})

	store, err := packstore.OpenDir(t.TempDir(), "local")
	if err != nil {
		t.Fatal(err)
	}
	var metas []packstore.PackMeta
	sound := map[string]packstore.PackMeta{}
	for i := range 6 {
		dest := fmt.Sprintf("shop%d", i%2+1)
		m := catalogtest.Write(t, store, catalogtest.Items, dest, fmt.Sprintf("pk%d", i), []catalogtest.Row{
			catalogtest.Ins(uint64(50+i), 1, map[string]any{"id": int64(i), "tenant": dest, "name": "n"}),
		})
		metas = append(metas, m)
		sound[proto.PackMsgID(m.PackID)] = m
		pub(t, js, packEvent(t, m, dest))
	}
	// Two bad events the indexer refuses (it terminates them): a pack whose
	// footer names shop2 announced on shop1, and a corrupt pack. They must
	// not hold the frontier back.
	evilData, evil := catalogtest.Encode(t, catalogtest.Items, "local", "shop2", "evil", []catalogtest.Row{catalogtest.Ins(60, 1, map[string]any{"id": int64(99), "tenant": "shop2"})})
	if err := store.Put(ctx, "shop1/public.items/evil.arrow", evilData); err != nil {
		t.Fatal(err)
	}
	evil.Destination = "shop1" // the event lies
	pub(t, js, packEvent(t, evil, "shop1"))
	// A corrupt pack.
	if err := store.Put(ctx, "shop1/public.items/corrupt.arrow", []byte("not a pack")); err != nil {
		t.Fatal(err)
	}
	corrupt := packEvent(t, packstore.PackMeta{PackID: "corrupt", StoreID: "local", Destination: "shop1", Table: "public.items", Schema: "x"}, "shop1")
	pub(t, js, corrupt)

	// The router has routed the first change only.
	ackOne(t, router)
	ackOne(t, fl0) // partition 0 flushed; partition 1 has not

	conn := chtest.Conn(t)
	reg := prometheus.NewRegistry()
	pb, err := publisher.New(cfg, publisher.Deps{JS: js, Catalog: conn, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	publisher.SetExpireEvery(pb, 50*time.Millisecond)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return standInIndexer(gctx, js, conn, store, cfg, sound) })
	g.Go(func() error { return pb.Run(gctx) })
	cat := catalog.New(conn, catalog.Options{})

	latest := func(want func(catalog.Snapshot) error) {
		t.Helper()
		eventually(t, "latest snapshot", func() error {
			s, err := cat.Latest(ctx)
			if err != nil {
				return err
			}
			return want(s)
		})
	}
	// Every good pack is published; the frontier is stuck on partition 1.
	latest(func(s catalog.Snapshot) error {
		if s.Packs != 6 {
			return fmt.Errorf("snapshot %d holds %d packs", s.Version, s.Packs)
		}
		return nil
	})
	if s, _ := cat.Latest(ctx); s.ThroughLSN != 0 {
		t.Fatalf("through_lsn %s claimed while flusher-p1 has not passed", s.ThroughLSN)
	}
	if st := pb.Status(); st.FrontierStage != "waiting for flushers" || !st.LeaseHeld {
		t.Fatalf("publisher status %+v", st)
	}
	// Partition 1 flushes: through_lsn may become 0/100, not 0/200.
	ackOne(t, fl1)
	latest(func(s catalog.Snapshot) error {
		if s.Through != "0/100" {
			return fmt.Errorf("through_lsn %s", s.Through)
		}
		return nil
	})
	// The router routes the second change; nothing new is pending anywhere.
	ackOne(t, router)
	latest(func(s catalog.Snapshot) error {
		if s.Through != "0/200" {
			return fmt.Errorf("through_lsn %s", s.Through)
		}
		return nil
	})
	rows, err := cat.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: "public.items"})
	if err != nil || len(rows.Rows) != 3 {
		t.Fatalf("shop1 rows %v %v", rows, err)
	}
	if rows, err := cat.Read(ctx, catalog.ReadRequest{Destination: "shop2", Table: "public.items"}); err != nil || len(rows.Rows) != 3 {
		t.Fatalf("shop2 rows %v %v", rows, err)
	}
	// Retention: the publisher moves the expiry horizon to the newest
	// snapshot (retain_min 1); the first snapshot then reads as expired.
	last, err := cat.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "expiry horizon", func() error {
		if h := pb.Status().ExpiryHorizon; h < last.Version {
			return fmt.Errorf("expiry horizon %d, want at least %d", h, last.Version)
		}
		return nil
	})
	if last.Version > 1 {
		if _, err := cat.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: "public.items", Version: 1}); !errors.Is(err, catalog.ErrExpired) {
			t.Errorf("reading expired version 1: %v, want ErrExpired", err)
		}
	}
	cancel()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// The lease was released on shutdown: another publisher takes it at once.
	if _, err := cat.AcquireLease(context.Background(), "next", time.Second); err != nil {
		t.Errorf("lease after shutdown: %v", err)
	}
}
