package publisher_test

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/services/publisher"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// TestPublisherCompactsAndCollects: the running publisher, given a pack
// store and aggressive lifecycle settings, compacts a destination's packs
// into one segment (its reads unchanged), and once the retention window
// passes collects the old packs: the store holds only the segment and the
// metrics count the work.
func TestPublisherCompactsAndCollects(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg := config.Default()
	cfg.Delivery.Partitions = 1
	cfg.Publisher.Interval = 30 * time.Millisecond
	cfg.Publisher.LeaseTTL = 10 * time.Second
	cfg.Catalog.SnapshotRetention, cfg.Catalog.SnapshotRetainMin = time.Microsecond, 1
	cfg.Catalog.GCGrace = time.Millisecond
	cfg.Catalog.CompactInterval, cfg.Catalog.GCInterval, cfg.Catalog.CompactMinPacks = 50*time.Millisecond, 50*time.Millisecond, 2
	js, conn, cat, store := lifecycleRig(ctx, t, cfg)
	var refs []catalog.PackRef
	for i := range 4 {
		m := catalogtest.Write(t, store, catalogtest.Items, "shop1", fmt.Sprintf("pk%d", i), []catalogtest.Row{
			catalogtest.Ins(uint64(50+i), 1, map[string]any{"id": int64(i % 2), "tenant": "shop1", "name": fmt.Sprint("v", i)}),
		})
		ref, err := catalog.ReadRef(ctx, store, m.Path())
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	if _, err := cat.Index(ctx, store, refs); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	pb, err := publisher.New(cfg, publisher.Deps{JS: js, Catalog: conn, Metrics: reg, Packs: store})
	if err != nil {
		t.Fatal(err)
	}
	publisher.SetExpireEvery(pb, 50*time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- pb.Run(ctx) }()
	files := func() []string {
		var out []string
		_ = filepath.WalkDir(store.Root(), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				out = append(out, p)
			}
			return nil
		})
		return out
	}
	eventually(t, "compaction and GC", func() error {
		s, err := cat.Latest(ctx)
		if err != nil {
			return err
		}
		ms, err := cat.Members(ctx, s.Version, "shop1", "")
		if err != nil {
			return err
		}
		if len(ms) != 1 || len(files()) != 1 {
			return fmt.Errorf("snapshot %d: %d members, store files %v", s.Version, len(ms), files())
		}
		return nil
	})
	p, err := cat.Read(ctx, catalog.ReadRequest{Destination: "shop1", Table: catalogtest.Items.Name})
	if err != nil || len(p.Rows) != 2 {
		t.Fatalf("read after compaction: %v %v", p, err)
	}
	for _, r := range p.Rows {
		t.Logf("%s", r)
	}
	if n := counterValue(t, reg, "sluice_compaction_runs_total"); n < 1 {
		t.Fatalf("sluice_compaction_runs_total %v", n)
	}
	if n := counterValue(t, reg, "sluice_catalog_gc_files_total"); n != 4 {
		t.Fatalf("sluice_catalog_gc_files_total %v, want the 4 packs", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// lifecycleRig starts what a publisher with a lifecycle runs on: an
// embedded JetStream with the pipeline's streams (closed with the test), a
// catalog with its schema, and a pack directory.
func lifecycleRig(ctx context.Context, t *testing.T, cfg config.Config) (jetstream.JetStream, catalog.Conn, *catalog.Catalog, *packstore.DirStore) {
	t.Helper()
	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, js, err := natsx.Connect(ctx, cfg.NATS, srv.ClientURL(), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
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
	return js, conn, cat, store
}

// counterValue reads a registered counter by name.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
