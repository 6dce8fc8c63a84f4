package capture

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/natsotel"
)

// publish encodes rec and sends it with through, split (encodeParts) so
// that no message exceeds nats.max_payload: every part but the last carries
// s.clean (all their rows lie after it). Only a single row over the limit
// halts the table.
func (s *session) publish(ctx context.Context, t *tableState, fingerprint string, rec arrow.RecordBatch, through proto.LSN) error {
	return s.publishClaimed(ctx, t, fingerprint, rec, through, 0)
}

// publishClaimed is publish of a batch carrying claimed bytes by reference
// (proto.HeaderClaimBytes on each of its messages: a part of a split batch
// says the whole, more than it holds, never less).
func (s *session) publishClaimed(ctx context.Context, t *tableState, fingerprint string, rec arrow.RecordBatch, through proto.LSN, claimed int64) error {
	parts, err := encodeParts(rec, s.o.MaxPayload, s.o.Metrics)
	if errors.Is(err, ErrTooLarge) {
		return s.halt(ctx, t, "too_large", fmt.Errorf("%s: %w", t.info.Name, err))
	}
	if err != nil {
		return fmt.Errorf("encoding batch of %s: %w", t.info.Name, err)
	}
	for i, p := range parts {
		th := s.clean
		if i == len(parts)-1 {
			th = through
		}
		o := claimedOut(batchOut(t.info.Name, fingerprint, p.first, p.last, th, p.rows, p.body), claimed)
		o.Span = s.span(o)
		if err := s.send(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// part is one encoded message body of a batch.
type part struct {
	body        []byte
	first, last proto.Position
	rows        int
}

// encodeParts encodes rec as one message body or, when that exceeds max
// (0: no limit), as halves, recursively. The split depends only on the
// rows, so a replay cuts the same messages (and message ids). A single row
// over max is ErrTooLarge.
func encodeParts(rec arrow.RecordBatch, max int, m *Metrics) ([]part, error) {
	body, err := arrowcodec.Encode(rec)
	if err != nil {
		return nil, err
	}
	n := rec.NumRows()
	if max <= 0 || len(body) <= max {
		return []part{{body: body, first: rowPos(rec, 0), last: rowPos(rec, int(n)-1), rows: int(n)}}, nil
	}
	if n < 2 {
		return nil, fmt.Errorf("%w: a row encodes to %d bytes (max %d); raise nats.max_payload or lower reader.max_inline_value", ErrTooLarge, len(body), max)
	}
	m.Splits.Inc()
	var out []part
	for _, h := range [][2]int64{{0, n / 2}, {n / 2, n}} {
		half := rec.NewSlice(h[0], h[1])
		p, err := encodeParts(half, max, m)
		half.Release()
		if err != nil {
			return nil, err
		}
		out = append(out, p...)
	}
	return out, nil
}

// rowPos is the position of rec's row i (its _sluice_lsn and _sluice_seq).
func rowPos(rec arrow.RecordBatch, i int) proto.Position {
	sc := rec.Schema()
	l := rec.Column(sc.FieldIndices(proto.ColLSN)[0]).(*array.Uint64)
	q := rec.Column(sc.FieldIndices(proto.ColSeq)[0]).(*array.Uint64)
	return proto.Position{LSN: proto.LSN(l.Value(i)), Seq: q.Value(i)}
}

// batchOut builds a CHANGES data message.
func batchOut(table, fingerprint string, first, last proto.Position, through proto.LSN, rows int, body []byte) Out {
	id := proto.ChangesMsgID(table, first, last)
	h := make(nats.Header, 10)
	h.Set(proto.HeaderWire, proto.WireVersion)
	h.Set(proto.HeaderTable, table)
	h.Set(proto.HeaderSchema, fingerprint)
	h.Set(proto.HeaderFirst, first.String())
	h.Set(proto.HeaderLast, last.String())
	h.Set(proto.HeaderThrough, through.String())
	h.Set(proto.HeaderRows, strconv.Itoa(rows))
	h.Set(proto.HeaderMsgID, id)
	return Out{Msg: &nats.Msg{Subject: proto.ChangesSubject(table), Header: h, Data: body}, ID: id, Through: through, Table: table, Rows: rows}
}

// claimedOut is o saying the bytes its batch carries by reference
// (proto.HeaderClaimBytes; 0: none).
func claimedOut(o Out, claimed int64) Out {
	if claimed > 0 {
		o.Msg.Header.Set(proto.HeaderClaimBytes, strconv.FormatInt(claimed, 10))
	}
	return o
}

// span starts the root span of a batch's trace and injects it.
func (s *session) span(o Out) trace.Span {
	return startSpan(s.o.Tracer, o)
}

func startSpan(tr trace.Tracer, o Out) trace.Span {
	if tr == nil {
		return nil
	}
	ctx, sp := tr.Start(context.Background(), "publish "+o.Msg.Subject, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", o.Msg.Subject),
			attribute.String("messaging.message.id", o.ID),
			attribute.Int("messaging.batch.message_count", o.Rows),
			attribute.Int("messaging.message.body.size", len(o.Msg.Data)),
			attribute.String("sluice.table", o.Table),
			attribute.String("sluice.first", o.Msg.Header.Get(proto.HeaderFirst)),
			attribute.String("sluice.last", o.Msg.Header.Get(proto.HeaderLast)),
		))
	natsotel.Inject(ctx, o.Msg.Header)
	return sp
}
