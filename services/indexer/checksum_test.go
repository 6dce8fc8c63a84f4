package indexer_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/indexer"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/catalog/catalogtest"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// TestChecksumMismatchIsDeadLettered: a small (uncompressed) pack whose
// one int64 value has a flipped bit is still a well-formed file that reads
// another id; its checksum (proto.MetaPackChecksum) refuses it, and the
// indexer takes the corrupt-pack path: a dead letter naming the file and
// both sums, the event terminated, the sound pack beside it indexed.
func TestChecksumMismatchIsDeadLettered(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ix, err := indexer.New(h.cfg, indexer.Deps{JS: h.js, Catalog: h.conn, Packs: h.store})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ix.Run(ctx) }()

	const marked = int64(0x5a17c0de00000101)
	rows := []catalogtest.Row{catalogtest.Ins(100, 1, map[string]any{"id": marked, "tenant": "shop3", "name": "x", "qty": int32(1)})}
	data, bad := catalogtest.Encode(t, catalogtest.Items, "local", "shop3", "p-flipped", rows)
	if len(data) >= packstore.CompressMinBytes {
		t.Fatalf("%d bytes: not a small pack", len(data))
	}
	var le [8]byte
	binary.LittleEndian.PutUint64(le[:], uint64(marked))
	if bytes.Count(data, le[:]) != 1 {
		t.Fatal("the marked id is not in the file once")
	}
	flipped := bytes.Clone(data)
	flipped[bytes.Index(flipped, le[:])] ^= 1
	if err := h.store.Put(ctx, bad.Path(), flipped); err != nil {
		t.Fatal(err)
	}
	good := catalogtest.Write(t, h.store, catalogtest.Items, "shop1", "p-good", rowsOf("shop1", 0, 5))
	h.announce(t, bad, len(flipped))
	h.announce(t, good, 0)

	cat := ix.Catalog()
	eventually(t, 30*time.Second, "the sound pack indexed", func() (bool, string) {
		got, err := cat.Indexed(ctx, []catalog.PackKey{{StoreID: "local", PackID: good.PackID}})
		return err == nil && len(got) == 1, "not yet"
	})
	eventually(t, 30*time.Second, "the flipped pack dead-lettered", func() (bool, string) {
		return len(h.deadLetters(t)) == 1, "no dead letter"
	})
	reason := h.deadLetters(t)[0].Header.Get(proto.HeaderReason)
	for _, want := range []string{bad.Path(), packstore.ErrCorruptPack.Error(), "checksum mismatch", "footer says xxh3:", "the file hashes to xxh3:"} {
		if !strings.Contains(reason, want) {
			t.Fatalf("dead letter reason %q does not say %q", reason, want)
		}
	}
	h.waitSettled(t, 2)
	if got, _ := cat.Indexed(ctx, []catalog.PackKey{{StoreID: "local", PackID: bad.PackID}}); len(got) != 0 {
		t.Fatal("the flipped pack is in the inventory")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
