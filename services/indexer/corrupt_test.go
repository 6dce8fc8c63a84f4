package indexer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/indexer"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/chtest"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	pt "github.com/sluice-cdc/sluice/shared/packstore/packstoretest"
)

// harness is an in-process JetStream with sluice's streams, a directory
// pack store and a chDB catalog database.
type harness struct {
	js    jetstream.JetStream
	store *packstore.DirStore
	conn  catalog.Conn
	cfg   config.Config
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	ctx := t.Context()
	srv, err := natsx.StartEmbedded(natsx.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	cfg := config.Default()
	nc, js, err := natsx.Connect(ctx, cfg.NATS, srv.ClientURL(), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := natsx.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	store, err := packstore.OpenDir(t.TempDir(), "local")
	if err != nil {
		t.Fatal(err)
	}
	return &harness{js: js, store: store, conn: chtest.Conn(t), cfg: cfg}
}

// announce publishes the pack event the flusher publishes for a pack.
func (h *harness) announce(t *testing.T, m packstore.PackMeta, size int) {
	t.Helper()
	if _, err := h.js.PublishMsg(t.Context(), catalogtest.PackEvent(t, m, m.Destination, int64(size))); err != nil {
		t.Fatal(err)
	}
}

// deadLetters returns every message on the DLQ stream.
func (h *harness) deadLetters(t *testing.T) []*jetstream.RawStreamMsg {
	t.Helper()
	s, err := h.js.Stream(t.Context(), proto.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			continue
		}
		out = append(out, m)
	}
	return out
}

// waitSettled waits until every PACKS event is settled (acked or
// terminated) on the indexer's consumer, its ack floor at stream sequence
// floor: nothing left to redeliver.
func (h *harness) waitSettled(t *testing.T, floor uint64) {
	t.Helper()
	eventually(t, 30*time.Second, "every PACKS event settled", func() (bool, string) {
		c, err := h.js.Consumer(t.Context(), proto.StreamPacks, proto.ConsumerIndexer)
		if err != nil {
			return false, err.Error()
		}
		ci, err := c.Info(t.Context())
		if err != nil {
			return false, err.Error()
		}
		return ci.NumAckPending == 0 && ci.NumPending == 0 && ci.AckFloor.Stream == floor,
			fmt.Sprintf("ack pending %d, pending %d, ack floor %d", ci.NumAckPending, ci.NumPending, ci.AckFloor.Stream)
	})
}

// eventually retries cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s (%s)", what, d, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func rowsOf(dest string, from, n int) []catalogtest.Row {
	var out []catalogtest.Row
	for i := from; i < from+n; i++ {
		out = append(out, catalogtest.Ins(100+uint64(i/100), uint64(i%100+1), map[string]any{
			"id": int64(i), "tenant": dest, "name": fmt.Sprintf("row %d of %s, long enough for the pack to compress", i, dest), "qty": int32(i),
		}))
	}
	return out
}

// TestCorruptPackIsDeadLettered: a pack written by the real writer and
// then damaged in the middle of its body (footer intact), announced on
// PACKS between sound packs of other destinations, is dead-lettered with
// its path and the reason, its event is terminated, and the indexer keeps
// running and indexing every other destination, before and after it.
// Before packs were verified whole, the damaged body reached the staging
// writer and the engine (which crashed the process or read garbage).
func TestCorruptPackIsDeadLettered(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	h.cfg.Indexer.BatchWait = 500 * time.Millisecond // the three packs go into one batch
	// A stale temporary file of a killed write, and a fresh one of a write
	// that may be under way.
	tableDir := filepath.Join(h.store.Root(), "shop1", "public.items")
	if err := os.MkdirAll(tableDir, 0o755); err != nil {
		t.Fatal(err)
	}
	stale, fresh := filepath.Join(tableDir, ".tmp-0000000000000000"), filepath.Join(tableDir, ".tmp-1111111111111111")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("half a pack"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * packstore.TempMaxAge)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}

	ix, err := indexer.New(h.cfg, indexer.Deps{JS: h.js, Catalog: h.conn, Packs: h.store})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx) }()

	good1 := catalogtest.Write(t, h.store, catalogtest.Items, "shop1", "p-good-1", rowsOf("shop1", 0, 50))
	good2 := catalogtest.Write(t, h.store, catalogtest.Items, "shop2", "p-good-2", rowsOf("shop2", 0, 50))
	data, bad := catalogtest.Encode(t, catalogtest.Items, "local", "shop3", "p-bad", rowsOf("shop3", 0, 2000))
	damaged := pt.DamageBody(data, 64)
	if err := h.store.Put(ctx, bad.Path(), damaged); err != nil {
		t.Fatal(err)
	}
	h.announce(t, good1, 0)
	h.announce(t, bad, len(damaged))
	h.announce(t, good2, 0)

	cat := ix.Catalog()
	indexed := func(ms ...packstore.PackMeta) func() (bool, string) {
		return func() (bool, string) {
			var keys []catalog.PackKey
			for _, m := range ms {
				keys = append(keys, catalog.PackKey{StoreID: "local", PackID: m.PackID})
			}
			got, err := cat.Indexed(ctx, keys)
			return err == nil && len(got) == len(keys), fmt.Sprintf("%d of %d indexed (%v); status %+v", len(got), len(keys), err, ix.Status())
		}
	}
	eventually(t, 30*time.Second, "the sound packs indexed", indexed(good1, good2))
	eventually(t, 30*time.Second, "the damaged pack dead-lettered", func() (bool, string) {
		n := len(h.deadLetters(t))
		return n == 1, fmt.Sprintf("%d dead letters", n)
	})
	dl := h.deadLetters(t)[0]
	reason := dl.Header.Get(proto.HeaderReason)
	if !strings.Contains(reason, bad.Path()) || !strings.Contains(reason, packstore.ErrCorruptPack.Error()) {
		t.Fatalf("dead letter reason %q does not name the path %s and the corruption", reason, bad.Path())
	}
	if got := dl.Header.Get(proto.HeaderOrigSubject); got != proto.PacksSubject("shop3") {
		t.Fatalf("dead letter of %s, want the pack's event", got)
	}
	// The event is settled (terminated), not redelivered.
	h.waitSettled(t, 3)
	if _, err := cat.Indexed(ctx, []catalog.PackKey{{StoreID: "local", PackID: bad.PackID}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := cat.Indexed(ctx, []catalog.PackKey{{StoreID: "local", PackID: bad.PackID}}); len(got) != 0 {
		t.Fatal("the damaged pack is in the inventory")
	}
	// Still running, still indexing.
	later := catalogtest.Write(t, h.store, catalogtest.Items, "shop1", "p-good-3", rowsOf("shop1", 50, 10))
	h.announce(t, later, 0)
	eventually(t, 30*time.Second, "a later pack indexed", indexed(later))
	select {
	case err := <-done:
		t.Fatalf("the indexer stopped: %v", err)
	default:
	}
	if st := ix.Status(); st.DeadLettered != 1 {
		t.Fatalf("status: %+v, want one dead letter", st)
	}
	// The reconciler's first pass removed the stale temporary file only.
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale temporary file still there (%v)", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("fresh temporary file removed: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// panickyStore is the real directory store, except that building the
// engine's read of one path panics: a fake for the one fault no real pack
// can produce on demand any more (a bug in Go code that indexing runs).
type panickyStore struct {
	*packstore.DirStore
	bad string
}

func (s panickyStore) TableFunction(path string) string {
	if path == s.bad {
		panic("test: a bug while indexing " + path)
	}
	return s.DirStore.TableFunction(path)
}

// TestIndexPanicIsDeadLettered: a panic while indexing a batch costs the
// batch one retry pack by pack and the culprit a dead letter (a permanent
// error), never the process; the other pack of the batch is indexed.
func TestIndexPanicIsDeadLettered(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	h.cfg.Indexer.BatchWait = 500 * time.Millisecond
	// Over the staging size, so the engine reads it in place.
	rnd := rand.New(rand.NewPCG(1, 2))
	var rows []catalogtest.Row
	for i := range 6000 {
		rows = append(rows, catalogtest.Ins(100, uint64(i+1), map[string]any{"id": int64(i), "tenant": "shop1", "name": fmt.Sprintf("%016x%016x%016x", rnd.Uint64(), rnd.Uint64(), rnd.Uint64())}))
	}
	bugged := catalogtest.Write(t, h.store, catalogtest.Items, "shop1", "p-bug", rows)
	fine := catalogtest.Write(t, h.store, catalogtest.Items, "shop2", "p-fine", rowsOf("shop2", 0, 3))
	ix, err := indexer.New(h.cfg, indexer.Deps{JS: h.js, Catalog: h.conn, Packs: panickyStore{h.store, bugged.Path()}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx) }()
	h.announce(t, bugged, 0)
	h.announce(t, fine, 0)
	eventually(t, 30*time.Second, "the other pack indexed and the culprit dead-lettered", func() (bool, string) {
		got, err := ix.Catalog().Indexed(ctx, []catalog.PackKey{{StoreID: "local", PackID: fine.PackID}})
		n := len(h.deadLetters(t))
		return err == nil && len(got) == 1 && n == 1, fmt.Sprintf("indexed %d (%v), %d dead letters", len(got), err, n)
	})
	reason := h.deadLetters(t)[0].Header.Get(proto.HeaderReason)
	if !strings.Contains(reason, natsx.ErrPanic.Error()) || !strings.Contains(reason, bugged.Path()) {
		t.Fatalf("dead letter reason %q", reason)
	}
	select {
	case err := <-done:
		t.Fatalf("the indexer stopped: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestLyingPackEventIsDeadLettered: tenant isolation. A pack whose footer
// names shop2, stored at a shop1 path and announced on shop1's subject
// (the event lies), is dead-lettered with the reason naming both, never
// indexed, and its event terminated; the sound pack beside it is indexed.
func TestLyingPackEventIsDeadLettered(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ix, err := indexer.New(h.cfg, indexer.Deps{JS: h.js, Catalog: h.conn, Packs: h.store})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	good := catalogtest.Write(t, h.store, catalogtest.Items, "shop1", "p-good", rowsOf("shop1", 0, 5))
	evilData, evil := catalogtest.Encode(t, catalogtest.Items, "local", "shop2", "p-evil", rowsOf("shop2", 0, 5))
	path := "shop1/public.items/p-evil.arrow"
	if err := h.store.Put(ctx, path, evilData); err != nil {
		t.Fatal(err)
	}
	evil.Destination = "shop1" // the event lies
	h.announce(t, evil, len(evilData))
	h.announce(t, good, 0)

	cat := ix.Catalog()
	eventually(t, 30*time.Second, "the sound pack indexed", func() (bool, string) {
		got, err := cat.Indexed(ctx, []catalog.PackKey{{StoreID: "local", PackID: good.PackID}})
		return err == nil && len(got) == 1, fmt.Sprintf("%v; status %+v", err, ix.Status())
	})
	eventually(t, 30*time.Second, "the lying event dead-lettered", func() (bool, string) {
		n := len(h.deadLetters(t))
		return n == 1, fmt.Sprintf("%d dead letters", n)
	})
	if reason := h.deadLetters(t)[0].Header.Get(proto.HeaderReason); !strings.Contains(reason, "pack at "+path+" says it is shop2") {
		t.Fatalf("dead letter reason %q does not name the path and the footer's destination", reason)
	}
	if got, err := cat.Indexed(ctx, []catalog.PackKey{{StoreID: "local", PackID: evil.PackID}}); err != nil || len(got) != 0 {
		t.Fatalf("the lying pack is in the inventory (%v)", err)
	}
	h.waitSettled(t, 2)
}
