package natsx

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
)

// Headers natsx adds to a dead letter besides the proto.Header* ones.
const (
	// HeaderOrigMsgID keeps the original Nats-Msg-Id.
	HeaderOrigMsgID = "Sluice-Orig-Msg-Id"
	// HeaderBodyOmitted is set (to the original body size) when the body was
	// left out because it would not fit under max_payload with the DLQ
	// headers; the original stays at Sluice-Orig-Stream/Seq.
	HeaderBodyOmitted = "Sluice-Body-Omitted"
	// HeaderDelivered is how many times the message had been delivered.
	HeaderDelivered = "Sluice-Delivered"
)

// MaxReasonLen bounds the Sluice-Reason header.
const MaxReasonLen = 1024

// DeadLetter records poison messages of one stage on sluice.dlq.<stage>.
type DeadLetter struct {
	js    jetstream.JetStream
	stage string
}

// NewDeadLetter returns the dead-letter writer of stage (reader, router,
// flusher, indexer, publisher).
func NewDeadLetter(js jetstream.JetStream, stage string) *DeadLetter {
	return &DeadLetter{js: js, stage: stage}
}

// Stage returns the stage this dead letter writes for.
func (d *DeadLetter) Stage() string { return d.stage }

// WithHeaders returns err carrying hdr: a dead letter whose reason wraps it
// (Send, SendData, through Permanent and the Settler too) gets these
// headers besides the copied ones, e.g. what a stage knows about the
// message that its headers do not say. WithHeaders(nil, …) is nil.
func WithHeaders(err error, hdr nats.Header) error {
	if err == nil {
		return nil
	}
	return &headeredError{err: err, hdr: hdr}
}

type headeredError struct {
	err error
	hdr nats.Header
}

func (e *headeredError) Error() string { return e.err.Error() }
func (e *headeredError) Unwrap() error { return e.err }

// Send copies msg's body and headers to sluice.dlq.<stage> with
// Sluice-Stage, Sluice-Reason, Sluice-Orig-Subject/Stream/Seq and
// Nats-Msg-Id = proto.DLQMsgID(stage, stream, seq). It retries transient
// failures until ctx ends.
func (d *DeadLetter) Send(ctx context.Context, msg jetstream.Msg, reason error) error {
	hdr := copyHeader(msg.Headers())
	hdr.Set(proto.HeaderOrigSubject, msg.Subject())
	var id string
	if meta, err := msg.Metadata(); err == nil {
		hdr.Set(proto.HeaderOrigStream, meta.Stream)
		hdr.Set(proto.HeaderOrigSeq, strconv.FormatUint(meta.Sequence.Stream, 10))
		hdr.Set(HeaderDelivered, strconv.FormatUint(meta.NumDelivered, 10))
		id = proto.DLQMsgID(d.stage, meta.Stream, meta.Sequence.Stream)
	} else {
		id = d.dataID(msg.Data(), msg.Headers())
	}
	return d.send(ctx, msg.Data(), hdr, reason, id)
}

// SendData records a body and headers that did not come from a stream
// message (e.g. one row split out of a batch). Its Nats-Msg-Id is derived
// from the original Nats-Msg-Id header when present, else from the body.
func (d *DeadLetter) SendData(ctx context.Context, body []byte, hdr nats.Header, reason error) error {
	return d.send(ctx, body, copyHeader(hdr), reason, d.dataID(body, hdr))
}

// SendDataWithID is SendData with the dead letter's identity given: for
// something no message stands behind (a file found by a sweep), id names
// it (e.g. its path), so that recording the same thing again is
// deduplicated and two different things never are. The Nats-Msg-Id is
// "d:<stage>:" + id.
func (d *DeadLetter) SendDataWithID(ctx context.Context, id string, body []byte, hdr nats.Header, reason error) error {
	return d.send(ctx, body, copyHeader(hdr), reason, "d:"+d.stage+":"+id)
}

func (d *DeadLetter) dataID(body []byte, hdr nats.Header) string {
	if orig := hdr.Get(proto.HeaderMsgID); orig != "" {
		return "d:" + d.stage + ":id:" + orig
	}
	sum := sha256.Sum256(body)
	return "d:" + d.stage + ":sha256:" + hex.EncodeToString(sum[:16])
}

func (d *DeadLetter) send(ctx context.Context, body []byte, hdr nats.Header, reason error, id string) error {
	if reason == nil {
		reason = fmt.Errorf("no reason given")
	}
	var he *headeredError
	if errors.As(reason, &he) {
		for k, vs := range he.hdr {
			hdr[k] = append([]string(nil), vs...)
		}
	}
	hdr.Set(proto.HeaderStage, d.stage)
	hdr.Set(proto.HeaderReason, HeaderValue(reason.Error(), MaxReasonLen))
	hdr.Set(proto.HeaderMsgID, id)
	msg := &nats.Msg{Subject: proto.DLQSubject(d.stage), Header: hdr, Data: body}
	if limit := maxPayload(d.js); limit > 0 && int64(len(body))+headerSize(hdr) > limit {
		hdr.Set(HeaderBodyOmitted, strconv.Itoa(len(body)))
		msg.Data = nil
	}
	if _, err := PublishSync(ctx, d.js, msg); err != nil {
		return fmt.Errorf("dead-lettering to %s: %w", msg.Subject, err)
	}
	return nil
}

// MaxPayload is the largest message js's server accepts (0: unknown).
func MaxPayload(js jetstream.JetStream) int64 { return maxPayload(js) }

func maxPayload(js jetstream.JetStream) int64 {
	if js == nil || js.Conn() == nil {
		return 0
	}
	return js.Conn().MaxPayload()
}

func headerSize(h nats.Header) int64 {
	n := int64(len("NATS/1.0\r\n\r\n"))
	for k, vs := range h {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4)
		}
	}
	return n
}

// copyHeader copies h without the Nats-* headers JetStream interprets
// (message id, expectations, TTL, rollup); the original message id is kept
// as Sluice-Orig-Msg-Id.
func copyHeader(h nats.Header) nats.Header {
	out := nats.Header{}
	for k, vs := range h {
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			continue
		}
		out[k] = append([]string(nil), vs...)
	}
	if id := h.Get(proto.HeaderMsgID); id != "" {
		out.Set(HeaderOrigMsgID, id)
	}
	return out
}

// HeaderValue makes s safe as a NATS header value: control characters
// (CR, LF, ...) become spaces and the result is cut to at most limit bytes
// on a UTF-8 boundary.
func HeaderValue(s string, limit int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
