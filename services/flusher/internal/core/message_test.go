package core

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sluice-cdc/sluice/proto"
)

type tItem Msg

func (it tItem) Msg() Msg { return Msg(it) }

func slice(seq uint64, pos uint64, slices int) tItem {
	p := proto.Position{LSN: proto.LSN(pos), Seq: 1}
	return tItem{Seq: seq, Delivered: 1, First: p, Last: p, Slices: slices}
}

// flushAll runs d's flush through its steps and commits it.
func flushAll(t *testing.T, d *Dest[tItem]) Resolved[tItem] {
	t.Helper()
	f := d.StartFlush()
	if f == nil {
		t.Fatal("nothing to flush")
	}
	for _, s := range []Step{StepWrite} {
		if err := f.Done(s); err != nil {
			t.Fatal(err)
		}
	}
	target, ok := d.CursorTarget(f)
	if ok {
		if err := d.CursorWritten(f, target); err != nil {
			t.Fatal(err)
		}
	} else if err := f.Done(StepCursor); err != nil {
		t.Fatal(err)
	}
	if err := f.Done(StepPublish); err != nil {
		t.Fatal(err)
	}
	res, ok, err := d.Commit(f, true)
	if err != nil || !ok {
		t.Fatalf("commit: %v %v", ok, err)
	}
	return res
}

func newSettled(t *testing.T) *Partition[tItem] {
	p := NewPartition[tItem](0, 1, nil, 0)
	p.Drained()
	if !p.Settle(0) {
		t.Fatal("not settled")
	}
	return p
}

// A message of two slices is acked by the commit of the second, not the
// first; Tracked counts it once.
func TestMessageAckedWhenEverySliceCommitted(t *testing.T) {
	p := newSettled(t)
	a, b := p.Dest("a"), p.Dest("b")
	for _, d := range []*Dest[tItem]{a, b} {
		if v, res := d.Receive(slice(7, 10, 2), p.Gen(), nil); v != Buffer || !res.Empty() {
			t.Fatalf("receive: %v %+v", v, res)
		}
	}
	if n := p.Tracked(); n != 1 {
		t.Fatalf("tracked %d, want 1 message", n)
	}
	if res := flushAll(t, a); !res.Empty() {
		t.Fatalf("first slice's commit resolved %+v", res)
	}
	if res := flushAll(t, b); len(res.Ack) != 1 || res.Ack[0].Seq != 7 || len(res.Nak) != 0 {
		t.Fatalf("second slice's commit resolved %+v, want ack 7", res)
	}
	if n := p.Tracked(); n != 0 {
		t.Fatalf("tracked %d after the ack", n)
	}
}

// A halted destination's slice naks the message once the other slice is
// committed; that slice stays pending at the halted destination only.
func TestMessageNakedWhenOneSliceNaked(t *testing.T) {
	p := newSettled(t)
	a, b := p.Dest("a"), p.Dest("b")
	b.halted = true
	if v, _ := a.Receive(slice(3, 10, 2), p.Gen(), nil); v != Buffer {
		t.Fatal(v)
	}
	if v, res := b.Receive(slice(3, 10, 2), p.Gen(), nil); v != NakHalted || !res.Empty() {
		t.Fatalf("halted slice: %v %+v (the other is still open)", v, res)
	}
	if res := flushAll(t, a); len(res.Nak) != 1 || len(res.Ack) != 0 {
		t.Fatalf("commit resolved %+v, want nak 3", res)
	}
	if a.Pending() != 0 || b.Pending() != 1 || p.Tracked() != 1 {
		t.Fatalf("pending a %d b %d tracked %d", a.Pending(), b.Pending(), p.Tracked())
	}
}

// A retired destination's slice is done at once: the other's commit acks.
func TestMessageRetiredSliceDoneAtOnce(t *testing.T) {
	p := newSettled(t)
	a, b := p.Dest("a"), p.Dest("b")
	a.Receive(slice(4, 10, 2), p.Gen(), nil)
	if v, res := b.Receive(slice(4, 10, 2), p.Gen(), func() Verdict { return Retired }); v != Retired || !res.Empty() || b.Pending() != 0 {
		t.Fatalf("retired slice: %v %+v pending %d", v, res, b.Pending())
	}
	if res := flushAll(t, a); len(res.Ack) != 1 {
		t.Fatalf("commit resolved %+v, want ack", res)
	}
}

// A failed flush of one slice naks the message once the other is resolved.
func TestMessageFailedSliceNaks(t *testing.T) {
	p := newSettled(t)
	a, b := p.Dest("a"), p.Dest("b")
	a.Receive(slice(5, 10, 2), p.Gen(), nil)
	b.Receive(slice(5, 10, 2), p.Gen(), nil)
	f := b.StartFlush()
	victims, nak, res := b.Fail(f, false, false)
	if len(victims) != 1 || !nak || !res.Empty() {
		t.Fatalf("fail: %d victims nak %v res %+v (a's slice still open)", len(victims), nak, res)
	}
	if res := flushAll(t, a); len(res.Nak) != 1 || len(res.Ack) != 0 {
		t.Fatalf("commit resolved %+v, want nak", res)
	}
}

// Forget drops only an idle destination; Load gives its cursor back.
func TestForgetAndLoad(t *testing.T) {
	p := newSettled(t)
	a := p.Dest("a")
	a.Receive(slice(1, 10, 1), p.Gen(), nil)
	if p.Forget("a") {
		t.Fatal("forgot a destination with a buffer")
	}
	flushAll(t, a)
	c := a.Cursor()
	if !p.Forget("a") || p.Holds("a") || p.Lookup("a") != nil {
		t.Fatal("idle destination not forgotten")
	}
	p.Load(map[string]proto.Position{"a": c})
	if !p.Holds("a") || p.Dest("a").Cursor() != c {
		t.Fatalf("reloaded cursor %s, want %s", p.Dest("a").Cursor(), c)
	}
}

// TestForgetKeepsOrder: destinations forgotten leave the creation order of
// the others (Dests) as it was, across the compaction of order's holes,
// and a forgotten destination created again comes last.
func TestForgetKeepsOrder(t *testing.T) {
	p := NewPartition[tItem](0, 1, nil, 0)
	var want []string
	for i := range 10 {
		n := fmt.Sprintf("d%d", i)
		p.Dest(n)
		want = append(want, n)
	}
	for _, n := range []string{"d1", "d3", "d4", "d5", "d6", "d8"} { // past half: compacts
		if !p.Forget(n) {
			t.Fatalf("Forget(%s) refused an idle destination", n)
		}
		want = slices.DeleteFunc(want, func(s string) bool { return s == n })
	}
	p.Dest("d3")
	want = append(want, "d3")
	var got []string
	for _, d := range p.Dests() {
		got = append(got, d.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Dests %v, want %v", got, want)
	}
}
