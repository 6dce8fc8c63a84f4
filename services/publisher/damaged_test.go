package publisher_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/publisher"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// TestDamagedMemberIsDeadLettered: the running publisher's compaction
// meets a member file of shop1 damaged after it was indexed: it
// dead-letters the file once on the indexer's DLQ subject with the headers
// that halt shop1 for its table (docs/adr/0034-corrupt-pack-halts.md) and
// compacts shop2 all the same. Before, every pass failed at the damaged
// file and nothing was compacted or halted.
func TestDamagedMemberIsDeadLettered(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	cfg := config.Default()
	cfg.Delivery.Partitions = 1
	cfg.Publisher.Interval = 30 * time.Millisecond
	cfg.Publisher.LeaseTTL = 10 * time.Second
	cfg.Catalog.CompactInterval, cfg.Catalog.CompactMinPacks = 50*time.Millisecond, 2
	nc, js, err := natsx.Connect(ctx, cfg.NATS, srv.ClientURL(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := natsx.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	conn := chtest.Conn(t)
	cat := catalog.New(conn, catalog.Options{})
	if err := cat.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(t.TempDir(), "local")
	if err != nil {
		t.Fatal(err)
	}
	var refs []catalog.PackRef
	var bad packstore.PackMeta
	for _, dest := range []string{"shop1", "shop2"} {
		for i := range 3 {
			m := catalogtest.Write(t, store, catalogtest.Items, dest, fmt.Sprintf("%s-%d", dest, i), []catalogtest.Row{
				catalogtest.Ins(uint64(50+i), 1, map[string]any{"id": int64(i), "tenant": dest, "name": fmt.Sprint("v", i)}),
			})
			ref, err := catalog.ReadRef(ctx, store, m.Path())
			if err != nil {
				t.Fatal(err)
			}
			refs = append(refs, ref)
			if dest == "shop1" && i == 1 {
				bad = m
			}
		}
	}
	if _, err := cat.Index(ctx, store, refs); err != nil {
		t.Fatal(err)
	}
	data, err := store.Get(ctx, bad.Path())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store.Root(), bad.Path()), pt.DamageBody(data, 16), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	pb, err := publisher.New(cfg, publisher.Deps{JS: js, Catalog: conn, Metrics: reg, Packs: store})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pb.Run(ctx) }()
	eventually(t, "shop2 compacted", func() error {
		s, err := cat.Latest(ctx)
		if err != nil {
			return err
		}
		ms, err := cat.Members(ctx, s.Version, "shop2", "")
		if err != nil || len(ms) != 1 {
			return fmt.Errorf("snapshot %d: shop2 has %d members (%v)", s.Version, len(ms), err)
		}
		return nil
	})
	stream, err := js.Stream(ctx, proto.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	var dl *jetstream.RawStreamMsg
	eventually(t, "the damaged file dead-lettered", func() error {
		m, err := stream.GetLastMsgForSubject(ctx, proto.DLQSubject("indexer"))
		if err != nil {
			return err
		}
		dl = m
		return nil
	})
	h := dl.Header
	if h.Get(proto.HeaderTable) != catalogtest.Items.Name || h.Get(proto.HeaderPackPath) != bad.Path() || h.Get(proto.HeaderDestination) != "shop1" ||
		h.Get(proto.HeaderHaltDestinations) != "1" || h.Get(proto.HeaderFirst) != "0/33:1" || h.Get(proto.HeaderReason) == "" {
		t.Fatalf("dead letter headers %v", h)
	}
	// Later passes do not record it again.
	time.Sleep(500 * time.Millisecond)
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(proto.DLQSubject("indexer")))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[proto.DLQSubject("indexer")]; n != 1 {
		t.Fatalf("%d dead letters of the damaged file, want 1", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
