package route

import (
	"bytes"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/router/internal/split"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
)

// TestEncodePartsParallel: encoding the parts on several workers yields
// exactly the serial messages (order, subjects, headers, bodies), every
// body is byte for byte arrowcodec.Encode's and decodes to its part's rows,
// and a part that cannot fit fails the batch with the same error either way.
func TestEncodePartsParallel(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rec := benchBatch(t, mem, 3000, 60)
	defer rec.Release()
	res, err := split.New(mem, split.Auto(), 2).Split(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	base := nats.Header{}
	base.Set(proto.HeaderTable, "public.orders")

	for _, maxPayload := range []int{0, 4 << 10} { // 4 KiB: most parts are cut
		serial := New(Options{Partitions: 8, MaxPayload: maxPayload, EncodeWorkers: 1})
		parallel := New(Options{Partitions: 8, MaxPayload: maxPayload, EncodeWorkers: 3})
		want, err := serial.encodeParts("in-1", base, res.Parts)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parallel.encodeParts("in-1", base, res.Parts)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || len(want) < len(res.Parts) {
			t.Fatalf("max payload %d: %d messages in parallel, %d serially, %d parts", maxPayload, len(got), len(want), len(res.Parts))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Subject != w.Subject || g.Header.Get(proto.HeaderMsgID) != w.Header.Get(proto.HeaderMsgID) ||
				g.Header.Get(proto.HeaderFirst) != w.Header.Get(proto.HeaderFirst) || !bytes.Equal(g.Data, w.Data) {
				t.Fatalf("max payload %d: message %d differs: %s %v vs %s %v", maxPayload, i, g.Subject, g.Header, w.Subject, w.Header)
			}
		}
		if maxPayload != 0 {
			continue
		}
		for i, p := range res.Parts {
			ref, err := arrowcodec.Encode(p.Batch)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[i].Data, ref) {
				t.Fatalf("part %s: body differs from arrowcodec.Encode's", p.Destination)
			}
			back, err := arrowcodec.Decode(got[i].Data, mem)
			if err != nil {
				t.Fatal(err)
			}
			if !array.RecordEqual(back, p.Batch) {
				t.Fatalf("part %s: decoded rows differ", p.Destination)
			}
			back.Release()
		}
	}

	// A limit no single row fits under: the batch fails, permanently, with
	// the first part's error in part order whatever the worker count.
	serial := New(Options{Partitions: 8, MaxPayload: 300, EncodeWorkers: 1})
	parallel := New(Options{Partitions: 8, MaxPayload: 300, EncodeWorkers: 3})
	_, werr := serial.encodeParts("in-1", base, res.Parts)
	_, gerr := parallel.encodeParts("in-1", base, res.Parts)
	if !errors.Is(werr, ErrTooLarge) || gerr == nil || gerr.Error() != werr.Error() {
		t.Fatalf("parallel error %v, serial %v", gerr, werr)
	}
}
