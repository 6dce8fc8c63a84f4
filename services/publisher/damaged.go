package publisher

import (
	"context"
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/packstore"
)

// deadLetterDamaged records a member file compaction found it cannot read
// (catalog.CompactStats.Damaged) as the indexer records a pack it cannot
// index: a dead letter on the indexer's DLQ subject whose body is the
// file's pack event (one row per destination, with its positions) and
// whose headers halt those destinations for the file's table from its
// first position (docs/adr/0034-corrupt-pack-halts.md), so `sluice
// status` lists the halt and `sluice wait` exits 2 until a resync or a
// replay of the restored file cures it. Its id is the indexer's for the
// same file, so the indexer's reconciler and compaction recording it
// within the duplicate window make one dead letter.
func deadLetterDamaged(ctx context.Context, dlq deadLetterer, d catalog.DamagedMember) error {
	b := array.NewRecordBuilder(memory.DefaultAllocator, proto.PackEventSchema)
	defer b.Release()
	for _, dest := range d.Destinations {
		for i, v := range []string{d.PackID, d.StoreID, dest, d.Table, d.Path, d.Fingerprint, d.First.String(), d.Last.String()} {
			b.Field(i).(*array.StringBuilder).Append(v)
		}
		b.Field(8).(*array.Int64Builder).Append(0)
		b.Field(9).(*array.Int64Builder).Append(0)
		b.Field(10).(*array.Int64Builder).Append(d.Bytes)
	}
	rec := b.NewRecordBatch()
	body, err := arrowcodec.Encode(rec)
	rec.Release()
	if err != nil {
		return fmt.Errorf("encoding the dead letter of damaged file %s: %w", d.Path, err)
	}
	hdr := nats.Header{}
	hdr.Set(proto.HeaderWire, proto.WireVersion)
	subject := proto.SegmentEventSubject(d.Table)
	if !packstore.IsSegmentPath(d.Path) && len(d.Destinations) == 1 {
		subject = proto.PacksSubject(d.Destinations[0])
	}
	hdr.Set(proto.HeaderOrigSubject, subject)
	hdr.Set(proto.HeaderTable, d.Table)
	hdr.Set(proto.HeaderPackPath, d.Path)
	hdr.Set(proto.HeaderFirst, d.First.String())
	hdr.Set(proto.HeaderLast, d.Last.String())
	hdr.Set(proto.HeaderHaltDestinations, strconv.Itoa(len(d.Destinations)))
	if len(d.Destinations) > 0 {
		hdr.Set(proto.HeaderHaltDestinationsHash, proto.DestinationsHash(d.Destinations))
	}
	if len(d.Destinations) == 1 {
		hdr.Set(proto.HeaderDestination, d.Destinations[0])
	}
	reason := fmt.Errorf("compaction cannot read member file %s of %s: %s", d.Path, d.Table, d.Reason)
	return dlq.SendDataWithID(ctx, "pack:"+d.StoreID+":"+d.Path, body, hdr, reason)
}

// deadLetterer is the dead-letter stream as deadLetterDamaged uses it.
type deadLetterer interface {
	SendDataWithID(ctx context.Context, id string, body []byte, hdr nats.Header, reason error) error
}
