package core

import (
	"fmt"

	"github.com/sluice-cdc/sluice/proto"
)

// A partition message carries one slice per destination. Each slice lives
// in its destination's Dest (live, in flight, pending) exactly as a
// per-destination message did; the partition tracks, per message, how
// many slices it has, how many were received and how many are still open
// (buffered or in flight), and whether one was nak'd. Once every slice is
// received and none is open, the message is resolved: acked if every
// slice was committed (or retired), else nak'd, once. So a message is
// acked only when every destination holds its rows in a durable pack with
// its cursor step and pack event done; a nak'd slice makes every other
// destination receive it again and flush it again (idempotent by
// position).
type track struct {
	want, seen, open int
	naked            bool
}

// trackOf is the track of the delivery m belongs to. A slice arriving
// when every slice of the message was already received starts a new
// delivery (a redelivery while an earlier delivery's slice is still
// open): the earlier open slices still count.
func (p *Partition[T]) trackOf(m Msg) *track {
	want := max(m.Slices, 1)
	if m.Seq == 0 {
		return &track{want: 1}
	}
	t := p.tracks[m.Seq]
	switch {
	case t == nil:
		t = &track{want: want}
		p.tracks[m.Seq] = t
	case t.seen >= t.want:
		t.seen, t.want = 0, want
	}
	return t
}

// resolve adds it's message to res if every slice is received and none is
// open.
func (p *Partition[T]) resolve(seq uint64, t *track, it T, res *Resolved[T]) {
	if t == nil || t.seen < t.want || t.open > 0 {
		return
	}
	if seq != 0 {
		delete(p.tracks, seq)
	}
	if t.naked {
		res.Nak = append(res.Nak, it)
	} else {
		res.Ack = append(res.Ack, it)
	}
}

// sliceDone records that it, an open slice, left its destination's
// buffers: committed, or nak'd (naked).
func (p *Partition[T]) sliceDone(it T, naked bool, res *Resolved[T]) {
	seq := it.Msg().Seq
	if seq == 0 {
		p.resolve(0, &track{want: 1, seen: 1, naked: naked}, it, res)
		return
	}
	t := p.tracks[seq]
	if t == nil {
		return
	}
	t.open--
	if naked {
		t.naked = true
	}
	if p.mut&AckFirstSlice != 0 && !naked && !t.naked {
		delete(p.tracks, seq)
		res.Ack = append(res.Ack, it)
		return
	}
	p.resolve(seq, t, it, res)
}

func (d *Dest[T]) setPending(seq uint64, s Span) {
	if seq == 0 {
		return
	}
	n := len(d.pending)
	d.pending[seq] = s
	if len(d.pending) > n { // new here: one lookup, not two
		d.p.npend[seq]++
	}
}

func (d *Dest[T]) delPending(seq uint64) {
	n := len(d.pending)
	delete(d.pending, seq)
	if len(d.pending) == n { // was not pending here
		return
	}
	if n := d.p.npend[seq] - 1; n > 0 {
		d.p.npend[seq] = n
	} else {
		delete(d.p.npend, seq)
	}
}

// Forget drops destination name from the partition's memory if it is
// idle: nothing live, in flight or pending, and not halted (a halt must
// outlive it). Its cursor is the persisted one (the last written or
// loaded); Load gives it back when the destination reappears. It reports
// whether name was dropped.
func (p *Partition[T]) Forget(name string) (ok bool) {
	defer func() { p.record(Record{Ev: EvForget, Dest: name, Out: fmt.Sprint(ok)}) }()
	d := p.dests[name]
	if d == nil {
		_, had := p.loaded[name]
		delete(p.loaded, name)
		return had
	}
	if len(d.live) > 0 || d.inflight != nil || len(d.pending) > 0 || d.halted {
		return false
	}
	delete(p.dests, name)
	delete(p.loaded, name)
	if i, ok := p.orderAt[name]; ok {
		p.order[i] = ""
		delete(p.orderAt, name)
		if p.holes++; p.holes > len(p.order)/2 {
			p.compactOrder()
		}
	}
	return true
}

// Load adds the persisted cursors of destinations the partition does not
// hold (a destination that reappears after Forget, or was not loaded at
// the claim); a destination it holds keeps its own.
func (p *Partition[T]) Load(cursors map[string]proto.Position) {
	p.record(Record{Ev: EvLoad, Loaded: cursors})
	for n, c := range cursors {
		if _, ok := p.dests[n]; !ok {
			p.loaded[n] = c
		}
	}
}

// Holds reports whether the partition holds destination name or its
// loaded cursor (so Dest(name) needs no Load first).
func (p *Partition[T]) Holds(name string) bool {
	if _, ok := p.dests[name]; ok {
		return true
	}
	_, ok := p.loaded[name]
	return ok
}

// compactOrder drops order's holes (forgotten destinations).
func (p *Partition[T]) compactOrder() {
	kept := p.order[:0]
	for _, n := range p.order {
		if n != "" {
			p.orderAt[n] = len(kept)
			kept = append(kept, n)
		}
	}
	clear(p.order[len(kept):])
	p.order, p.holes = kept, 0
}
