package core

import (
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice/proto"
)

// Live is the destination's live buffer (not to be modified).
func (d *Dest[T]) Live() []T { return d.live }

// Inflight is the flush in flight, or nil.
func (d *Dest[T]) Inflight() *Flush[T] { return d.inflight }

// Cursor is the cursor as last loaded or written.
func (d *Dest[T]) Cursor() proto.Position { return d.cursor }

// Pending is the number of pending messages.
func (d *Dest[T]) Pending() int { return len(d.pending) }

// Halted reports whether a permanent failure halted the destination.
func (d *Dest[T]) Halted() bool { return d.halted }

// Resume clears a halt; it reports whether the destination was halted.
func (d *Dest[T]) Resume() bool {
	was := d.halted
	d.halted = false
	d.p.record(Record{Ev: EvResume, Dest: d.Name, Out: fmt.Sprint(was)})
	return was
}

// Receive decides what to do with a slice fetched at failure generation
// gen, and returns the messages it resolved (its own, when it was the
// last open slice of it). hook, if not nil, is the shell's lifecycle: it
// runs after the lost and deadline checks and answers Retired (the slice
// is done at once), NakHeld (held and full: nak'd, kept pending) or Buffer
// (not its business).
func (d *Dest[T]) Receive(it T, gen uint64, hook func() Verdict) (v Verdict, res Resolved[T]) {
	m := it.Msg()
	defer func() {
		if d.p.rec != nil {
			// A copy: &m itself would move m to the heap on every call,
			// recorded or not (one allocation per slice received).
			rm := m
			d.p.record(Record{Ev: EvReceive, Dest: d.Name, Msg: &rm, Gen: gen, Out: v.String() + res.text()})
		}
	}()
	if d.p.lost {
		return Release, res
	}
	t := d.p.trackOf(m)
	t.seen++
	v = Buffer
	switch {
	case d.p.expired && d.p.mut&NoFetchDeadline == 0:
		// Past the deadline this replica may no longer hold the lease: the
		// slice is nak'd, but stays pending (nak'd) should the lease turn
		// out held (Renewed), so no cursor of this owner passes it.
		v = NakExpired
	case hook != nil:
		if hv := hook(); hv == Retired || hv == NakHeld {
			v = hv
		}
	}
	if v == Buffer {
		switch {
		case d.halted:
			v = NakHalted
		case d.p.mut&NoEpochCheck == 0 && d.failGen > gen:
			// The fetch raced a failed flush of this destination: the read
			// is discarded as if it never happened; the message redelivers.
			v = NakEpoch
		case d.p.mut&DropRedelivered != 0 && m.Delivered > 1 && !d.cursor.Less(m.Last):
			v = AckDrop
		}
	}
	switch v {
	case Buffer:
		d.live = append(d.live, it)
		d.setPending(m.Seq, Span{First: m.First, Last: m.Last})
		t.open++
		return v, res
	case Retired, AckDrop:
		// Done at once: it never holds the cursor or the ack floor.
		d.delPending(m.Seq)
	case NakHeld:
		t.naked = true
		if d.p.mut&ForgetHeld != 0 {
			d.delPending(m.Seq)
		} else {
			d.setPending(m.Seq, Span{First: m.First, Last: m.Last, Naked: true})
		}
	default: // NakExpired, NakHalted, NakEpoch
		t.naked = true
		d.setPending(m.Seq, Span{First: m.First, Last: m.Last, Naked: true})
	}
	d.p.resolve(m.Seq, t, it, &res)
	return v, res
}

// EvictLive empties the live buffer of a held destination, keeping every
// slice pending as nak'd; it returns them (to release) and the messages
// they resolved (to nak).
func (d *Dest[T]) EvictLive() (out []T, res Resolved[T]) {
	out = d.live
	d.live = nil
	for _, it := range out {
		d.markNaked(it.Msg().Seq)
		d.p.sliceDone(it, true, &res)
	}
	d.p.record(Record{Ev: EvEvict, Dest: d.Name, Out: seqs(out) + res.text()})
	return out, res
}

func (d *Dest[T]) markNaked(seq uint64) {
	if s, ok := d.pending[seq]; ok {
		s.Naked = true
		d.pending[seq] = s
	}
}

// StartFlush swaps the live buffer out into a flush, or returns nil when
// there is nothing to flush or a flush is in flight.
func (d *Dest[T]) StartFlush() (f *Flush[T]) {
	defer func() {
		if d.p.rec == nil {
			return
		}
		out := "none"
		if f != nil {
			out = seqs(f.Items)
		}
		d.p.record(Record{Ev: EvStart, Dest: d.Name, Out: out})
	}()
	if d.inflight != nil || len(d.live) == 0 || d.halted || d.p.lost {
		return nil
	}
	steps := normalSteps
	if d.p.mut&AckBeforeCursor != 0 {
		steps = earlySteps
	}
	f = &Flush[T]{Items: d.live, Term: d.p.term, Epoch: d.epoch, d: d, steps: steps}
	d.inflight = f
	d.live = nil
	return f
}

// prev is the position just before p.
func prev(p proto.Position) proto.Position {
	if p.Seq > 0 {
		return proto.Position{LSN: p.LSN, Seq: p.Seq - 1}
	}
	if p.LSN == 0 {
		return proto.Position{}
	}
	return proto.Position{LSN: p.LSN - 1, Seq: proto.MaxSeq}
}

// CursorTarget is the cursor to write once f's packs are durable: the
// highest position in a pack, capped just below the first position still
// pending outside f. ok is false when nothing is to be written (not
// settled, lost, or not past the cursor): the shell then completes
// StepCursor without a write (Done, which refuses it when lost).
func (d *Dest[T]) CursorTarget(f *Flush[T]) (target proto.Position, ok bool) {
	defer func() {
		if d.p.rec != nil {
			d.p.record(Record{Ev: EvTarget, Dest: d.Name, Out: fmt.Sprint(target, " ", ok)})
		}
	}()
	if !d.p.seeded || d.p.lost {
		// Not settled: a message pending elsewhere may sit below the
		// target. The flush commits; a later one advances the cursor.
		return proto.Position{}, false
	}
	hi := d.maxResolved
	// The flush's messages: a map only for a large flush (the many
	// destinations of a partition flush a few messages each).
	var inJob map[uint64]bool
	var few [smallFlush]uint64
	if len(f.Items) > smallFlush {
		inJob = make(map[uint64]bool, len(f.Items))
	}
	for i, it := range f.Items {
		m := it.Msg()
		if hi.Less(m.Last) {
			hi = m.Last
		}
		if inJob != nil {
			inJob[m.Seq] = true
		} else {
			few[i] = m.Seq
		}
	}
	isJob := func(seq uint64) bool {
		if inJob != nil {
			return inJob[seq]
		}
		return slices.Contains(few[:len(f.Items)], seq)
	}
	if d.p.mut&ScalarMaxCursor == 0 {
		for seq, s := range d.pending {
			if isJob(seq) {
				continue
			}
			lim := prev(s.First)
			if d.p.mut&InclusiveBound != 0 {
				lim = s.First
			}
			if lim.Less(hi) {
				hi = lim
			}
		}
	}
	return hi, d.cursor.Less(hi)
}

// smallFlush is the most items a flush's CursorTarget finds by scanning
// rather than through a map.
const smallFlush = 16

// CursorWritten records that the cursor was written at pos (StepCursor).
func (d *Dest[T]) CursorWritten(f *Flush[T], pos proto.Position) (err error) {
	defer func() {
		if d.p.rec != nil {
			rp := pos // a copy, as in Receive
			d.p.record(Record{Ev: EvWritten, Dest: d.Name, Pos: &rp, Out: errText(err)})
		}
	}()
	if f.Next() != StepCursor {
		return ErrOutOfOrder
	}
	if d.p.lost {
		return ErrLost
	}
	if d.cursor.Less(pos) {
		d.cursor = pos
	}
	f.advance()
	return nil
}

// Commit is the ack step: live is the shell's check, right before, that
// the lease the flush started under is still held and live. The flush's
// slices are committed; it returns the messages this resolved (to ack the
// ones whose every slice is committed, to nak those another destination
// nak'd), or ok false when the ack is fenced (the shell treats the
// partition as lost and fails the flush).
func (d *Dest[T]) Commit(f *Flush[T], live bool) (res Resolved[T], ok bool, err error) {
	defer func() {
		if d.p.rec == nil {
			return
		}
		out := "fenced"
		switch {
		case err != nil:
			out = err.Error()
		case ok:
			out = "ack " + seqs(f.Items) + res.text()
		}
		d.p.record(Record{Ev: EvCommit, Dest: d.Name, Flag: live, Out: out})
	}()
	if f.Next() != StepAck {
		return res, false, ErrOutOfOrder
	}
	if d.p.mut&NoAckFence == 0 && (!live || d.p.lost || d.p.term != f.Term) {
		return res, false, nil
	}
	for _, it := range f.Items {
		m := it.Msg()
		d.delPending(m.Seq)
		if d.maxResolved.Less(m.Last) {
			d.maxResolved = m.Last
		}
		d.p.sliceDone(it, false, &res)
	}
	f.advance()
	return res, true, nil
}

// Fail applies the flush-failure rule to f: the in-flight and the live
// buffer are discarded (victims, to release), their slices nak'd but kept
// pending until redelivered, the read epoch bumped, and the destination
// halted on a permanent failure; res are the messages this resolved, to
// nak (those whose other slices are still open are nak'd when they are
// resolved). For a lost partition (or lost true) nothing is nak'd: the
// victims are released and redeliver to the next owner.
func (d *Dest[T]) Fail(f *Flush[T], permanent, lost bool) (victims []T, nak bool, res Resolved[T]) {
	defer func() {
		if d.p.rec == nil {
			return
		}
		d.p.record(Record{Ev: EvFail, Dest: d.Name, Flag: permanent, Lost: lost, Out: fmt.Sprint(nak, " ", seqs(victims)) + res.text()})
	}()
	if d.inflight == f {
		d.inflight = nil
	}
	if d.p.lost || lost {
		return f.Items, false, res
	}
	victims = f.Items
	if d.p.mut&KeepLiveOnFailure == 0 {
		victims = append(victims[:len(victims):len(victims)], d.live...)
		d.live = nil
	}
	for _, it := range victims {
		seq := it.Msg().Seq
		if d.p.mut&ForgetNaked != 0 {
			d.delPending(seq)
		} else {
			d.markNaked(seq)
		}
		d.p.sliceDone(it, true, &res)
	}
	d.p.gen++
	d.failGen = d.p.gen
	d.epoch++
	if permanent {
		d.halted = true
	}
	return victims, true, res
}
