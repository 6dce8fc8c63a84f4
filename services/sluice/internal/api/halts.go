package api

// Halts of corrupt packs (docs/adr/0034-corrupt-pack-halts.md): a pack or
// segment the indexer dead-lettered is in no snapshot while the
// publisher's frontier passes its changes, so it halts its destinations
// (for its table) from its first position until it is cured. The record is
// the indexer's dead letter itself, on the DLQ stream: its headers say the
// table, pack path, first and last positions and how many destinations
// (with a hash of their names), its body (the pack event) names them. The
// status reads them here, a bounded scan cached for a second, and records
// each in the state database's halt ledger (state.HaltLedger), so a halt
// outlives its dead letter (the DLQ's max age): it is cured when sluice
// replays or purges its dead letter (an operator who accepts the loss), or
// when resyncs of its table (the whole table, or each of its
// destinations) are done after it and published.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/state"
)

// PackHalt is one dead-lettered pack or segment holding its destinations:
// GET /api/v1/status lists them as halted_packs (in the halts view too).
type PackHalt struct {
	// DLQSeq is the dead letter's sequence on the DLQ stream.
	DLQSeq uint64 `json:"dlq_seq"`
	Table  string `json:"table,omitempty"`
	// Destinations are those still halted (at most maxHaltNames of them);
	// DestinationCount counts them all (0: unknown, a segment the
	// reconciler found: every destination of the table it holds).
	Destinations     []string `json:"destinations,omitempty"`
	DestinationCount int      `json:"destination_count"`
	PackPath         string   `json:"pack_path,omitempty"`
	// FirstPosition and LastPosition bound the pack's changes ("":
	// unknown, which holds every position).
	FirstPosition  string    `json:"first_position,omitempty"`
	LastPosition   string    `json:"last_position,omitempty"`
	Reason         string    `json:"reason"`
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	// Recover lists the commands that cure it, any one of them.
	Recover []string `json:"recover"`
	// RecoveringEndLSN is set when resyncs done after the dead letter cover
	// every destination: the halt is cured once a snapshot is through it
	// (then it leaves the list).
	RecoveringEndLSN string `json:"recovering_end_lsn,omitempty"`
	// Gone: its dead letter is no longer on the DLQ (its max age passed,
	// or it was deleted outside sluice); the halt is kept in the state
	// database until a resync covers it or `sluice dlq purge --seq N`
	// accepts the loss.
	Gone bool `json:"dead_letter_gone,omitempty"`
}

// maxHaltScan bounds the dead letters one status reads (the DLQ keeps
// seven days); past it, one more halt at an unknown position says so.
// maxHaltNames bounds the names listed per halt (`sluice dlq show SEQ`
// shows them all).
const (
	maxHaltScan  = 10000
	maxHaltNames = 100
	haltCacheTTL = 1500 * time.Millisecond
)

// packHaltsOff switches the corrupt-pack halts off: a test knob (negative
// control of INVARIANTS.md rule 11).
var packHaltsOff atomic.Bool

// SetPackHaltsOff switches the halts of dead-lettered packs off (true) or
// on: for the negative control only.
func SetPackHaltsOff(off bool) { packHaltsOff.Store(off) }

type haltCache struct {
	mu    sync.Mutex
	at    time.Time
	key   [3]uint64 // the DLQ's indexer dead letters, last and first sequence when read
	halts []PackHalt
	err   error
}

// packHalts returns the halts of dead-lettered packs. The DLQ is asked
// every time whether its indexer dead letters changed (one stream info):
// a new dead letter is seen at once, so a snapshot read before a status
// never passes a halt the status does not show yet. Otherwise the scan is
// reused for haltCacheTTL (what cures a halt, a resync or a snapshot, is
// seen that much later: a halt shows a moment longer, never shorter).
func (a *handler) packHalts(ctx context.Context) ([]PackHalt, error) {
	if packHaltsOff.Load() || a.d.JS == nil || a.halts == nil {
		return nil, nil
	}
	stream, err := a.d.JS.Stream(ctx, proto.StreamDLQ)
	if err != nil {
		return nil, fmt.Errorf("opening stream %s: %w", proto.StreamDLQ, err)
	}
	subject := proto.DLQSubject("indexer")
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", proto.StreamDLQ, err)
	}
	key := [3]uint64{info.State.Subjects[subject], info.State.LastSeq, info.State.FirstSeq}
	c := a.halts
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && !c.at.IsZero() && c.key == key && time.Since(c.at) < haltCacheTTL {
		return c.halts, nil
	}
	c.halts, c.err = a.readPackHalts(ctx, stream, key[0])
	c.at, c.key = time.Now(), key
	return c.halts, c.err
}

func (a *handler) readPackHalts(ctx context.Context, stream jetstream.Stream, total uint64) ([]PackHalt, error) {
	halts, err := scanIndexerDeadLetters(ctx, stream, total)
	if err != nil {
		return nil, err
	}
	if halts, err = a.ledgered(ctx, halts); err != nil || len(halts) == 0 {
		return halts, err
	}
	var resyncs []state.Resync
	if a.d.Resyncs != nil {
		if resyncs, err = a.d.Resyncs.List(ctx, a.d.Config.Source.Slot, 1000); err != nil {
			return nil, fmt.Errorf("reading the resyncs that cure corrupt packs: %w", err)
		}
	}
	var through proto.LSN
	published := false
	if a.d.Reads != nil {
		var snap *Snapshot
		if n, ok := a.d.Reads.(NewestReads); ok {
			snap, _ = n.Newest(ctx)
		} else if page, err := a.d.Reads.Snapshots(ctx, SnapshotsQuery{Limit: 1}); err == nil && len(page.Snapshots) > 0 {
			snap = &page.Snapshots[len(page.Snapshots)-1]
		}
		if snap != nil {
			through, err = proto.ParseLSN(snap.ThroughLSN)
			published = err == nil
		}
	}
	out := []PackHalt{}
	var ended []uint64
	for _, h := range halts {
		h, cured := cure(h, resyncs)
		if cured && published {
			if end, err := proto.ParseLSN(h.RecoveringEndLSN); err == nil && through >= end {
				ended = append(ended, h.DLQSeq)
				continue
			}
		}
		if len(h.Destinations) > maxHaltNames {
			h.Destinations = h.Destinations[:maxHaltNames]
		}
		out = append(out, h)
	}
	if a.d.Halts != nil && len(ended) > 0 {
		if err := a.d.Halts.End(ctx, ended...); err != nil {
			a.d.Log.Warn("ending cured halts in the ledger", "err", err) // shown a while longer: the safe side
		}
	}
	return out, nil
}

// ledgered records the halts scanned from the DLQ in the ledger and adds
// the recorded ones whose dead letter is gone (the DLQ's max age, or a
// delete outside sluice): a halt ends when sluice ends it, never with its
// message. Without a ledger the halts are the DLQ's alone.
func (a *handler) ledgered(ctx context.Context, halts []PackHalt) ([]PackHalt, error) {
	if a.d.Halts == nil {
		return halts, nil
	}
	kept, err := a.d.Halts.List(ctx)
	if err != nil {
		return nil, err
	}
	type key struct {
		seq uint64
		at  int64
	}
	known := make(map[key]bool, len(kept))
	for _, k := range kept {
		known[key{k.Seq, k.DeadLetteredAt.UnixMicro()}] = true
	}
	onDLQ := make(map[key]bool, len(halts))
	var fresh []state.LedgerHalt
	for _, h := range halts {
		if h.DLQSeq == 0 {
			continue // the "more than maxHaltScan" marker
		}
		k := key{h.DLQSeq, h.DeadLetteredAt.UnixMicro()}
		onDLQ[k] = true
		if known[k] {
			continue
		}
		b, err := json.Marshal(h)
		if err != nil {
			return nil, err
		}
		fresh = append(fresh, state.LedgerHalt{Seq: h.DLQSeq, DeadLetteredAt: h.DeadLetteredAt, Halt: b})
	}
	if err := a.d.Halts.Record(ctx, fresh); err != nil {
		return nil, err
	}
	for _, k := range kept {
		if onDLQ[key{k.Seq, k.DeadLetteredAt.UnixMicro()}] {
			continue
		}
		var h PackHalt
		if err := json.Unmarshal(k.Halt, &h); err != nil {
			return nil, fmt.Errorf("reading the halt of dead letter %d from the ledger: %w", k.Seq, err)
		}
		h.Gone = true
		halts = append(halts, h)
	}
	return halts, nil
}

// cure applies the resyncs done after the halt: a whole-table one cures
// it, one of a destination takes that destination out. cured: every
// destination is covered, and the halt's RecoveringEndLSN is the highest
// end of the resyncs that did it.
func cure(h PackHalt, resyncs []state.Resync) (PackHalt, bool) {
	var last proto.Position
	var lastOK bool
	if h.LastPosition != "" {
		var err error
		last, err = proto.ParsePosition(h.LastPosition)
		lastOK = err == nil
	}
	var end proto.LSN
	bump := func(r state.Resync) {
		if e, err := proto.ParseLSN(r.EndLSN); err == nil && e > end {
			end = e
		}
	}
	whole := false
	for _, r := range resyncs {
		if r.State != state.ResyncDone || r.Table != h.Table || h.Table == "" || !resyncAfter(r, h, last, lastOK) {
			continue
		}
		if r.Destination == "" {
			whole = true
			bump(r)
			continue
		}
		if i := slices.Index(h.Destinations, r.Destination); i >= 0 && len(h.Destinations) == h.DestinationCount {
			h.Destinations = slices.Delete(slices.Clone(h.Destinations), i, i+1)
			h.DestinationCount--
			bump(r)
		}
	}
	if whole || h.DestinationCount == 0 && len(h.Destinations) == 0 && h.Table != "" && end > 0 {
		h.RecoveringEndLSN = end.String()
		h.Recover = nil
		return h, true
	}
	h.Recover = recoverCommands(h)
	return h, false
}

// resyncAfter: the resync's copy began after the pack's changes, so it
// re-copied what they left at the source and its clear covers them. With
// the pack's last position known: its bound (the first chunk's low
// watermark, in the WAL) is past it. Otherwise: it started after the dead
// letter was written.
func resyncAfter(r state.Resync, h PackHalt, last proto.Position, lastOK bool) bool {
	if lastOK {
		if b, err := proto.ParseLSN(r.BoundLSN); err == nil {
			return b > last.LSN
		}
	}
	return r.StartedAt != nil && r.StartedAt.After(h.DeadLetteredAt)
}

func recoverCommands(h PackHalt) []string {
	if h.DLQSeq == 0 {
		return []string{"sluice dlq list --stage indexer"}
	}
	var out []string
	if h.Table != "" {
		if h.DestinationCount > 0 && len(h.Destinations) == h.DestinationCount && h.DestinationCount <= 8 {
			for _, d := range h.Destinations {
				out = append(out, "sluice resync --table "+h.Table+" --destination "+d)
			}
		}
		out = append(out, "sluice resync --table "+h.Table)
	}
	if h.Gone {
		return append(out, fmt.Sprintf("sluice dlq purge --seq %d (its dead letter is gone: accept the loss)", h.DLQSeq))
	}
	out = append(out, fmt.Sprintf("sluice dlq replay %d (once the file is restored)", h.DLQSeq))
	return out
}

// scanIndexerDeadLetters reads the indexer's dead letters, oldest first, at
// most maxHaltScan of them, each as a halt (Recover not yet set).
func scanIndexerDeadLetters(ctx context.Context, stream jetstream.Stream, total uint64) ([]PackHalt, error) {
	subject := proto.DLQSubject("indexer")
	if total == 0 {
		return nil, nil
	}
	var out []PackHalt
	err := natsx.ScanStream(ctx, stream, subject, int(min(total, maxHaltScan)), time.Second, func(seq uint64, at time.Time, m jetstream.Msg) {
		out = append(out, haltOf(seq, at, m.Headers(), m.Data()))
	})
	if err != nil {
		return nil, fmt.Errorf("reading the indexer's dead letters: %w", err)
	}
	if total > maxHaltScan {
		out = append(out, PackHalt{
			Reason: fmt.Sprintf("%d indexer dead letters, only the oldest %d read: the others hold at an unknown position (sluice dlq list --stage indexer)", total, maxHaltScan),
		})
	}
	return out, nil
}

// haltOf reads one indexer dead letter: the headers the indexer adds
// (proto.HeaderHaltDestinations and the rest), else what the body (the
// pack event) says, for dead letters written before them.
func haltOf(seq uint64, at time.Time, hdr nats.Header, body []byte) PackHalt {
	h := PackHalt{
		DLQSeq: seq, DeadLetteredAt: at.UTC(), Reason: hdr.Get(proto.HeaderReason),
		Table: hdr.Get(proto.HeaderTable), PackPath: hdr.Get(proto.HeaderPackPath),
		FirstPosition: hdr.Get(proto.HeaderFirst), LastPosition: hdr.Get(proto.HeaderLast),
		DestinationCount: -1,
	}
	if n, err := strconv.Atoi(hdr.Get(proto.HeaderHaltDestinations)); err == nil && n >= 0 {
		h.DestinationCount = n
	}
	ev := decodePackEvent(body)
	if h.Table == "" {
		h.Table = ev.table
	}
	if h.PackPath == "" {
		h.PackPath = ev.path
	}
	if h.FirstPosition == "" {
		h.FirstPosition = ev.first
	}
	if h.LastPosition == "" {
		h.LastPosition = ev.last
	}
	names := ev.destinations
	if len(names) == 1 && names[0] == "" {
		names = nil
	}
	switch {
	case h.DestinationCount < 0: // written before the headers
		h.DestinationCount = len(names)
		h.Destinations = names
	case len(names) == h.DestinationCount && (h.DestinationCount == 0 || proto.DestinationsHash(names) == hdr.Get(proto.HeaderHaltDestinationsHash)):
		h.Destinations = names
	case h.DestinationCount == 1 && hdr.Get(proto.HeaderDestination) != "":
		h.Destinations = []string{hdr.Get(proto.HeaderDestination)}
	}
	if len(h.Destinations) == 0 && h.DestinationCount > 0 {
		h.Destinations = nil // the body is gone: names unknown, count known
	}
	return h
}

type packEvent struct {
	table, path, first, last string
	destinations             []string
}

// decodePackEvent reads what a halt needs from a pack event body; a body
// that does not decode gives nothing.
func decodePackEvent(body []byte) packEvent {
	var ev packEvent
	if len(body) == 0 {
		return ev
	}
	rec, err := arrowcodec.Decode(body, memory.NewGoAllocator())
	if err != nil {
		return ev
	}
	defer rec.Release()
	col := func(name string) *array.String {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) != 1 {
			return nil
		}
		c, _ := rec.Column(idx[0]).(*array.String)
		return c
	}
	n := int(rec.NumRows())
	if c := col("table"); c != nil && n > 0 && c.IsValid(0) {
		ev.table = c.Value(0)
	}
	if c := col("path"); c != nil && n > 0 && c.IsValid(0) {
		ev.path = c.Value(0)
	}
	if c := col("destination"); c != nil {
		for i := range n {
			ev.destinations = append(ev.destinations, c.Value(i))
		}
	}
	var lo, hi proto.Position
	if c := col("first"); c != nil {
		for i := range n {
			if p, err := proto.ParsePosition(c.Value(i)); err == nil && (ev.first == "" || p.Less(lo)) {
				ev.first, lo = c.Value(i), p
			}
		}
	}
	if c := col("last"); c != nil {
		for i := range n {
			if p, err := proto.ParsePosition(c.Value(i)); err == nil && (ev.last == "" || hi.Less(p)) {
				ev.last, hi = c.Value(i), p
			}
		}
	}
	return ev
}

// Listed returns the halt's destinations as a status line shows them.
func (h PackHalt) Listed() string {
	switch {
	case h.DestinationCount == 0:
		return "every destination of " + h.Table + " the segment holds (unknown)"
	case len(h.Destinations) == 0:
		return fmt.Sprintf("%d destinations (names in sluice dlq show %d)", h.DestinationCount, h.DLQSeq)
	case len(h.Destinations) < h.DestinationCount:
		return fmt.Sprintf("%s … (%d destinations)", strings.Join(h.Destinations, ", "), h.DestinationCount)
	}
	return strings.Join(h.Destinations, ", ")
}
