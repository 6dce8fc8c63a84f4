package api

// Dead letters: list, show, replay and purge the DLQ stream, as functions
// on a jetstream.JetStream (DLQ) that `sluice dlq --nats` calls directly,
// and as HTTP endpoints (RegisterDLQ) that `sluice dlq` calls on a running
// process — the only way in when that process embeds NATS (`sluice dev`).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/httpx"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/state"
)

// DLQEntry is one dead letter.
type DLQEntry struct {
	Seq         uint64    `json:"seq"`
	Stage       string    `json:"stage"`
	Reason      string    `json:"reason"`
	OrigSubject string    `json:"orig_subject,omitempty"`
	OrigStream  string    `json:"orig_stream,omitempty"`
	OrigSeq     uint64    `json:"orig_seq,omitempty"`
	Time        time.Time `json:"time"`
	Bytes       int       `json:"bytes"`
	// BodyOmitted is the original body size when it did not fit in the DLQ
	// (it stays at OrigStream/OrigSeq while that stream keeps it).
	BodyOmitted int `json:"body_omitted,omitempty"`
	// Headers and Body are filled by Show only.
	Headers map[string][]string `json:"headers,omitempty"`
	Body    *BodySummary        `json:"body,omitempty"`
}

// BodySummary describes an Arrow IPC body without its values.
type BodySummary struct {
	Rows     int64             `json:"rows"`
	Fields   []FieldSummary    `json:"fields"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Error says why the body could not be decoded (it is often why it was
	// dead-lettered).
	Error string `json:"error,omitempty"`
}

// FieldSummary is one column of a body.
type FieldSummary struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
	Kind     string `json:"kind,omitempty"`
	PgType   string `json:"pg_type,omitempty"`
}

// ReplayResult is the outcome of replaying one dead letter.
type ReplayResult struct {
	Seq     uint64 `json:"seq"`
	Subject string `json:"subject,omitempty"`
	Stream  string `json:"stream,omitempty"`
	NewSeq  uint64 `json:"new_seq,omitempty"`
	// Duplicate is true when the stream had already stored this replay
	// (same Nats-Msg-Id within its duplicate window).
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     string `json:"error,omitempty"`
}

// PurgeResult counts purged dead letters.
type PurgeResult struct {
	Purged uint64 `json:"purged"`
}

// ClientHeader must be present on every request that changes state
// (guard.go).
const ClientHeader = "X-Sluice-Client"

// ErrDLQEntry marks a dead letter that cannot be replayed as asked.
var ErrDLQEntry = errors.New("dead letter cannot be replayed")

// dlqOnlyHeaders are the headers natsx.DeadLetter adds; a replay drops them.
var dlqOnlyHeaders = []string{
	proto.HeaderStage, proto.HeaderReason, proto.HeaderOrigSubject, proto.HeaderOrigStream,
	proto.HeaderOrigSeq, natsx.HeaderOrigMsgID, natsx.HeaderBodyOmitted, natsx.HeaderDelivered,
	proto.HeaderHaltDestinations, proto.HeaderHaltDestinationsHash,
}

// DLQ operates on the dead-letter stream.
type DLQ struct {
	js jetstream.JetStream
	// listWait bounds the wait for the last page of a listing.
	listWait time.Duration
	// noReplayID publishes replays without a Nats-Msg-Id: a test knob that
	// switches replay deduplication off (negative control).
	noReplayID bool
	// stopBeforeDelete makes Replay return right after the publish, as a
	// crash there would (test knob).
	stopBeforeDelete bool
	// replayToOrigin replays a router dead letter into CHANGES, its
	// original stream, rather than REPLAY: a test knob (negative control)
	// that breaks the reader's publish chain.
	replayToOrigin bool
	// ledger keeps the halts of the indexer's dead letters (halts.go):
	// a replay or purge through here ends them; nil without a state
	// database.
	ledger *state.HaltLedger
}

// endHalts ends the ledger's halts of the dead letters at seqs (nil seqs:
// every one); a failure is logged by the caller's reply as an error, so
// the operator asks again rather than leaving a halt behind unnoticed.
func (d *DLQ) endHalts(ctx context.Context, all bool, seqs ...uint64) error {
	if d.ledger == nil {
		return nil
	}
	if all {
		return d.ledger.EndAll(ctx)
	}
	return d.ledger.End(ctx, seqs...)
}

// NewDLQ returns the dead-letter operations over js.
func NewDLQ(js jetstream.JetStream) *DLQ { return &DLQ{js: js, listWait: 2 * time.Second} }

func validStage(stage string) error {
	if stage == "" {
		return nil
	}
	for _, c := range stage {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: stage %q: want lowercase letters, digits, _ or -", ErrBadRequest, stage)
		}
	}
	return nil
}

func stageFilter(stage string) string {
	if stage == "" {
		return proto.SubjectDLQAll
	}
	return proto.DLQSubject(stage)
}

// List returns the dead letters (of one stage when stage is not empty),
// oldest first, at most limit (0: no limit).
func (d *DLQ) List(ctx context.Context, stage string, limit int) ([]DLQEntry, error) {
	if err := validStage(stage); err != nil {
		return nil, err
	}
	stream, err := d.js.Stream(ctx, proto.StreamDLQ)
	if err != nil {
		return nil, fmt.Errorf("opening stream %s: %w", proto.StreamDLQ, err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(stageFilter(stage)))
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", proto.StreamDLQ, err)
	}
	var total uint64
	for _, n := range info.State.Subjects {
		total += n
	}
	out := []DLQEntry{}
	if total == 0 {
		return out, nil
	}
	n := int(min(total, 1<<20))
	if limit > 0 {
		n = min(n, limit)
	}
	err = natsx.ScanStream(ctx, stream, stageFilter(stage), n, d.listWait, func(seq uint64, at time.Time, m jetstream.Msg) {
		out = append(out, entry(seq, m.Subject(), m.Headers(), len(m.Data()), at))
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", proto.StreamDLQ, err)
	}
	return out, nil
}

func entry(seq uint64, subject string, h nats.Header, size int, at time.Time) DLQEntry {
	e := DLQEntry{
		Seq:         seq,
		Stage:       h.Get(proto.HeaderStage),
		Reason:      h.Get(proto.HeaderReason),
		OrigSubject: h.Get(proto.HeaderOrigSubject),
		OrigStream:  h.Get(proto.HeaderOrigStream),
		Time:        at.UTC(),
		Bytes:       size,
	}
	if e.Stage == "" {
		e.Stage = strings.TrimPrefix(subject, "sluice.dlq.")
	}
	e.OrigSeq, _ = strconv.ParseUint(h.Get(proto.HeaderOrigSeq), 10, 64)
	e.BodyOmitted, _ = strconv.Atoi(h.Get(natsx.HeaderBodyOmitted))
	return e
}

func (d *DLQ) get(ctx context.Context, seq uint64) (jetstream.Stream, *jetstream.RawStreamMsg, error) {
	stream, err := d.js.Stream(ctx, proto.StreamDLQ)
	if err != nil {
		return nil, nil, fmt.Errorf("opening stream %s: %w", proto.StreamDLQ, err)
	}
	m, err := stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil, fmt.Errorf("%w: no dead letter at sequence %d", ErrNotFound, seq)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading dead letter %d: %w", seq, err)
	}
	return stream, m, nil
}

// Show returns one dead letter with its headers and a summary of its body.
func (d *DLQ) Show(ctx context.Context, seq uint64) (DLQEntry, error) {
	_, m, err := d.get(ctx, seq)
	if err != nil {
		return DLQEntry{}, err
	}
	e := entry(m.Sequence, m.Subject, m.Header, len(m.Data), m.Time)
	e.Headers = map[string][]string{}
	for k, v := range m.Header {
		e.Headers[k] = v
	}
	if len(m.Data) > 0 {
		e.Body = Summarize(m.Data)
	}
	return e, nil
}

// Summarize decodes an Arrow IPC body into its schema and row count; a body
// that does not decode gets the decoder's error instead.
func Summarize(body []byte) *BodySummary {
	rec, err := arrowcodec.Decode(body, memory.NewGoAllocator())
	if err != nil {
		return &BodySummary{Error: err.Error()}
	}
	defer rec.Release()
	s := &BodySummary{Rows: rec.NumRows(), Fields: []FieldSummary{}}
	for _, f := range rec.Schema().Fields() {
		fs := FieldSummary{Name: f.Name, Type: f.Type.String(), Nullable: f.Nullable}
		if v, ok := f.Metadata.GetValue(proto.MetaKind); ok {
			fs.Kind = v
		}
		if v, ok := f.Metadata.GetValue(proto.MetaPgType); ok {
			fs.PgType = v
		}
		s.Fields = append(s.Fields, fs)
	}
	if md := rec.Schema().Metadata(); md.Len() > 0 {
		s.Metadata = map[string]string{}
		for i, k := range md.Keys() {
			s.Metadata[k] = md.Values()[i]
		}
	}
	return s
}

// Replay republishes dead letter seq to its original subject with its
// original headers and Nats-Msg-Id "replay:<seq>", then deletes it from the
// DLQ. A body the DLQ omitted is read back from the original stream.
//
// A dead letter from CHANGES (the router's) goes to REPLAY instead
// (proto.ReplaySubject), which the router consumes like CHANGES: the reader
// chains every publish to CHANGES on the stream's last message id, so a
// message from anyone else there would fail the reader's next publish and
// restart its session. The replayed rows keep their positions; apply is by
// position, newest wins, so an old change replayed after a newer version of
// its row never overrides it.
func (d *DLQ) Replay(ctx context.Context, seq uint64) (ReplayResult, error) {
	res := ReplayResult{Seq: seq}
	stream, m, err := d.get(ctx, seq)
	if err != nil {
		return res, err
	}
	subject := m.Header.Get(proto.HeaderOrigSubject)
	if subject == "" {
		return res, fmt.Errorf("%w: dead letter %d has no %s header (it did not come from a stream)", ErrDLQEntry, seq, proto.HeaderOrigSubject)
	}
	if strings.HasPrefix(subject, "sluice.dlq.") {
		return res, fmt.Errorf("%w: dead letter %d names the DLQ itself (%s) as its origin", ErrDLQEntry, seq, subject)
	}
	if subject == proto.SubjectTick {
		return res, fmt.Errorf("%w: dead letter %d is a reader tick (%s): it carries no change", ErrDLQEntry, seq, subject)
	}
	if r, ok := proto.ReplaySubject(subject); ok && !d.replayToOrigin {
		subject = r
	}
	body := m.Data
	if m.Header.Get(natsx.HeaderBodyOmitted) != "" {
		origStream := m.Header.Get(proto.HeaderOrigStream)
		origSeq, _ := strconv.ParseUint(m.Header.Get(proto.HeaderOrigSeq), 10, 64)
		if origStream == "" || origSeq == 0 {
			return res, fmt.Errorf("%w: dead letter %d has no body and no original to read it from", ErrDLQEntry, seq)
		}
		orig, err := d.js.Stream(ctx, origStream)
		if err != nil {
			return res, fmt.Errorf("opening stream %s for the body of dead letter %d: %w", origStream, seq, err)
		}
		om, err := orig.GetMsg(ctx, origSeq)
		if err != nil {
			return res, fmt.Errorf("%w: the body of dead letter %d was omitted and %s/%d is gone: %v", ErrDLQEntry, seq, origStream, origSeq, err)
		}
		body = om.Data
	}
	hdr := nats.Header{}
	for k, v := range m.Header {
		hdr[k] = append([]string(nil), v...)
	}
	for _, k := range dlqOnlyHeaders {
		hdr.Del(k)
	}
	for k := range hdr {
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			delete(hdr, k)
		}
	}
	if !d.noReplayID {
		hdr.Set(proto.HeaderMsgID, ReplayMsgID(seq))
	}
	msg := &nats.Msg{Subject: subject, Header: hdr, Data: body}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ack, err := natsx.PublishSync(pctx, d.js, msg)
	if err != nil {
		return res, fmt.Errorf("replaying dead letter %d: %w", seq, err)
	}
	res.Subject, res.Stream, res.NewSeq, res.Duplicate = subject, ack.Stream, ack.Sequence, ack.Duplicate
	if d.stopBeforeDelete {
		return res, nil
	}
	if err := stream.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return res, fmt.Errorf("deleting replayed dead letter %d (republished as %s/%d): %w", seq, ack.Stream, ack.Sequence, err)
	}
	if err := d.endHalts(ctx, false, seq); err != nil {
		return res, fmt.Errorf("dead letter %d replayed as %s/%d, but its halt is still recorded: %w", seq, ack.Stream, ack.Sequence, err)
	}
	return res, nil
}

// ReplayMsgID is the Nats-Msg-Id of the replay of dead letter seq: a replay
// repeated inside the target stream's duplicate window (say, after a crash
// between the publish and the delete) is stored once.
func ReplayMsgID(seq uint64) string { return "replay:" + strconv.FormatUint(seq, 10) }

// ReplayAll replays every dead letter (of one stage when stage is not
// empty). It goes on past an entry that cannot be replayed and reports it.
func (d *DLQ) ReplayAll(ctx context.Context, stage string) ([]ReplayResult, error) {
	entries, err := d.List(ctx, stage, 0)
	if err != nil {
		return nil, err
	}
	out := []ReplayResult{}
	for _, e := range entries {
		r, err := d.Replay(ctx, e.Seq)
		if err != nil {
			if ctx.Err() != nil {
				return out, err
			}
			r.Error = err.Error()
		}
		out = append(out, r)
	}
	return out, nil
}

// Purge deletes dead letters: one (seq > 0), one stage's, or all.
func (d *DLQ) Purge(ctx context.Context, stage string, seq uint64) (PurgeResult, error) {
	if err := validStage(stage); err != nil {
		return PurgeResult{}, err
	}
	stream, err := d.js.Stream(ctx, proto.StreamDLQ)
	if err != nil {
		return PurgeResult{}, fmt.Errorf("opening stream %s: %w", proto.StreamDLQ, err)
	}
	if seq > 0 {
		if stage != "" {
			_, m, err := d.get(ctx, seq)
			if errors.Is(err, ErrNotFound) && stage == "indexer" && d.endsGoneHalt(ctx, seq) {
				return PurgeResult{Purged: 1}, nil
			}
			if err != nil {
				return PurgeResult{}, err
			}
			if got := entry(m.Sequence, m.Subject, m.Header, 0, m.Time).Stage; got != stage {
				return PurgeResult{}, fmt.Errorf("%w: dead letter %d is from stage %s, not %s", ErrBadRequest, seq, got, stage)
			}
		}
		if err := stream.DeleteMsg(ctx, seq); err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				if d.endsGoneHalt(ctx, seq) {
					return PurgeResult{Purged: 1}, nil
				}
				return PurgeResult{}, fmt.Errorf("%w: no dead letter at sequence %d", ErrNotFound, seq)
			}
			return PurgeResult{}, fmt.Errorf("purging dead letter %d: %w", seq, err)
		}
		if err := d.endHalts(ctx, false, seq); err != nil {
			return PurgeResult{}, fmt.Errorf("dead letter %d purged, but its halt is still recorded (purge it again): %w", seq, err)
		}
		return PurgeResult{Purged: 1}, nil
	}
	before, err := stream.Info(ctx, jetstream.WithSubjectFilter(stageFilter(stage)))
	if err != nil {
		return PurgeResult{}, fmt.Errorf("reading stream %s: %w", proto.StreamDLQ, err)
	}
	var n uint64
	for _, c := range before.State.Subjects {
		n += c
	}
	var opts []jetstream.StreamPurgeOpt
	if stage != "" {
		opts = append(opts, jetstream.WithPurgeSubject(stageFilter(stage)))
	}
	if err := stream.Purge(ctx, opts...); err != nil {
		return PurgeResult{}, fmt.Errorf("purging %s: %w", stageFilter(stage), err)
	}
	if stage == "" || stage == "indexer" {
		if err := d.endHalts(ctx, true); err != nil {
			return PurgeResult{}, fmt.Errorf("%s purged, but the halts are still recorded (purge again): %w", stageFilter(stage), err)
		}
	}
	return PurgeResult{Purged: n}, nil
}

// endsGoneHalt ends the recorded halt of a dead letter no longer on the
// DLQ (its max age passed): purging it is how an operator accepts the
// loss. It reports whether the ledger held one.
func (d *DLQ) endsGoneHalt(ctx context.Context, seq uint64) bool {
	if d.ledger == nil {
		return false
	}
	kept, err := d.ledger.List(ctx)
	if err != nil {
		return false
	}
	for _, k := range kept {
		if k.Seq == seq {
			return d.ledger.End(ctx, seq) == nil
		}
	}
	return false
}

// RegisterDLQ mounts the dead-letter endpoints on h:
//
//	GET    /api/v1/dlq?stage=S&limit=N      list (oldest first)
//	GET    /api/v1/dlq/{seq}                one entry with headers and body summary
//	POST   /api/v1/dlq/{seq}/replay         replay one
//	POST   /api/v1/dlq/replay?stage=S       replay all (of a stage)
//	DELETE /api/v1/dlq/{seq}?stage=S        purge one
//	POST   /api/v1/dlq/purge?stage=S        purge all (of a stage)
//
// api.Register calls it with Deps.JS; a process without NATS skips it. The
// endpoints that change the DLQ (POST, DELETE) pass the request guard of
// every change (guard.go): ClientHeader, which a browser cannot send
// cross-site without a CORS preflight this server never grants, and no
// other origin's page; a web page cannot purge or replay dead letters
// through a local `sluice dev` that runs without a token.
func RegisterDLQ(h *httpx.Server, d Deps) {
	if d.JS == nil {
		return
	}
	a := &handler{d: d}
	q := NewDLQ(d.JS)
	q.ledger = d.Halts
	guarded := func(f http.HandlerFunc) http.Handler { return changes("to change dead letters", f) }
	h.Handle("GET /api/v1/dlq", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := 0
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				a.fail(w, errors.Join(ErrBadRequest, errors.New("limit must be a non-negative number")))
				return
			}
			limit = n
		}
		out, err := q.List(r.Context(), r.URL.Query().Get("stage"), limit)
		a.reply(w, out, err)
	}))
	h.Handle("GET /api/v1/dlq/{seq}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seq, err := seqParam(r)
		if err != nil {
			a.fail(w, err)
			return
		}
		out, err := q.Show(r.Context(), seq)
		a.reply(w, out, err)
	}))
	h.Handle("POST /api/v1/dlq/{seq}/replay", guarded(func(w http.ResponseWriter, r *http.Request) {
		seq, err := seqParam(r)
		if err != nil {
			a.fail(w, err)
			return
		}
		out, err := q.Replay(r.Context(), seq)
		a.reply(w, out, err)
	}))
	h.Handle("POST /api/v1/dlq/replay", guarded(func(w http.ResponseWriter, r *http.Request) {
		out, err := q.ReplayAll(r.Context(), r.URL.Query().Get("stage"))
		a.reply(w, out, err)
	}))
	h.Handle("DELETE /api/v1/dlq/{seq}", guarded(func(w http.ResponseWriter, r *http.Request) {
		seq, err := seqParam(r)
		if err != nil {
			a.fail(w, err)
			return
		}
		out, err := q.Purge(r.Context(), r.URL.Query().Get("stage"), seq)
		a.reply(w, out, err)
	}))
	h.Handle("POST /api/v1/dlq/purge", guarded(func(w http.ResponseWriter, r *http.Request) {
		out, err := q.Purge(r.Context(), r.URL.Query().Get("stage"), 0)
		a.reply(w, out, err)
	}))
}

func seqParam(r *http.Request) (uint64, error) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		return 0, errors.Join(ErrBadRequest, fmt.Errorf("sequence %q: want a positive number", r.PathValue("seq")))
	}
	return seq, nil
}

func (a *handler) reply(w http.ResponseWriter, v any, err error) {
	if errors.Is(err, ErrDLQEntry) {
		writeJSON(w, http.StatusConflict, Error{Error: err.Error()})
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}
