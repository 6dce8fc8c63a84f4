package publisher_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/publisher"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// failingJS fails Stream for one stream while fail is set: a transient
// error (a timeout, a leader election) in the middle of a claim pass, a
// fault a real server cannot be made to produce on demand for one call.
type failingJS struct {
	jetstream.JetStream
	stream string
	fail   atomic.Bool
}

func (f *failingJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if f.fail.Load() && name == f.stream {
		return nil, errors.New("nats: timeout (a transient fault made by the test)")
	}
	return f.JetStream.Stream(ctx, name)
}

// TestClaimGCOriginalUnreadable: a dead letter too large to carry its body
// names its original in ROUTED, whose row holds a claim. A pass that cannot
// read the original (a transient error) fails and deletes nothing; it does
// not take the dead letter for one without claims and remember that, which
// would let the claim go in that pass or any later one. The control (the
// original really gone) shows the claim is then collectable, so the test
// would see a claim deleted.
func TestClaimGCOriginalUnreadable(t *testing.T) {
	ctx := t.Context()
	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	cfg := config.Default()
	cfg.Delivery.Partitions = 1
	cfg.Catalog.ClaimsGrace = time.Hour
	cfg.NATS.MaxAge = time.Hour
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
	const x = proto.LSN(0x10000)
	lease, err := cat.AcquireLease(ctx, "test", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Publish(ctx, lease, 10*time.Second, x); err != nil {
		t.Fatal(err)
	}

	const table = "public.docs"
	pos := proto.Position{LSN: x - 5, Seq: 1}
	// setup: the original in ROUTED, a body-omitted dead letter naming it,
	// and the claim its row refers to, written 2 hours ago.
	setup := func(t *testing.T) (claim string, store *packstore.DirStore, orig uint64) {
		ack, err := js.Publish(ctx, proto.RoutedSubject(0, "~c4n64"), claimBody(t, proto.Position{LSN: x - 30, Seq: 1}, pos))
		if err != nil {
			t.Fatal(err)
		}
		hdr := nats.Header{}
		hdr.Set(natsx.HeaderBodyOmitted, "2000000")
		hdr.Set(proto.HeaderOrigStream, proto.StreamRouted)
		hdr.Set(proto.HeaderOrigSeq, strconv.FormatUint(ack.Sequence, 10))
		hdr.Set(proto.HeaderStage, "flusher")
		hdr.Set(proto.HeaderReason, "halted destination")
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: proto.DLQSubject("flusher"), Header: hdr}); err != nil {
			t.Fatal(err)
		}
		store, err = packstore.OpenDir(t.TempDir(), "local")
		if err != nil {
			t.Fatal(err)
		}
		claim = proto.ClaimPath(table, pos, "body")
		if err := store.PutClaim(ctx, claim, []byte("a large value")); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-2 * time.Hour)
		if err := os.Chtimes(filepath.Join(store.Root(), filepath.FromSlash(claim)), old, old); err != nil {
			t.Fatal(err)
		}
		return claim, store, ack.Sequence
	}
	purge := func(t *testing.T) {
		for _, name := range []string{proto.StreamDLQ, proto.StreamRouted} {
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Purge(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	kept := func(t *testing.T, store *packstore.DirStore, claim string) bool {
		_, err := store.GetClaim(ctx, claim)
		if err != nil && !errors.Is(err, packstore.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	t.Run("transient", func(t *testing.T) {
		defer purge(t)
		claim, store, _ := setup(t)
		fjs := &failingJS{JetStream: js, stream: proto.StreamRouted}
		pb, err := publisher.New(cfg, publisher.Deps{JS: fjs, Catalog: conn, Metrics: prometheus.NewRegistry(), Packs: store})
		if err != nil {
			t.Fatal(err)
		}
		fjs.fail.Store(true)
		if _, err := publisher.CollectClaims(ctx, pb, time.Now()); err == nil {
			t.Error("a pass that could not read a dead letter's original succeeded")
		}
		if !kept(t, store, claim) {
			t.Fatal("a pass that could not read a dead letter's original deleted the claim its row holds")
		}
		fjs.fail.Store(false)
		st, err := publisher.CollectClaims(ctx, pb, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !kept(t, store, claim) || st.Floor != pos {
			t.Fatalf("once the original reads again, the claim is kept %v with the floor %v (want %v): the failed read was remembered as no claims", kept(t, store, claim), st.Floor, pos)
		}
	})

	t.Run("negative control/original gone", func(t *testing.T) {
		defer purge(t)
		claim, store, orig := setup(t)
		s, err := js.Stream(ctx, proto.StreamRouted)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteMsg(ctx, orig); err != nil {
			t.Fatal(err)
		}
		pb, err := publisher.New(cfg, publisher.Deps{JS: js, Catalog: conn, Metrics: prometheus.NewRegistry(), Packs: store})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := publisher.CollectClaims(ctx, pb, time.Now()); err != nil {
			t.Fatal(err)
		}
		if kept(t, store, claim) {
			t.Fatal("with the original gone the claim is still kept: the test could not see a claim deleted")
		}
	})
}
