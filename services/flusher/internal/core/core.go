package core

import (
	"errors"
	"fmt"

	"github.com/sluice-cdc/sluice/proto"
)

// Msg is what the protocol knows of one ROUTED message.
type Msg struct {
	Seq         uint64 // stream sequence; 0 (unknown) is never pending
	Delivered   uint64 // delivery count, 1 on the first delivery
	First, Last proto.Position
}

// Item is a buffered message as the shell holds it.
type Item interface{ Msg() Msg }

// Mutant switches one protocol rule off. Only the model checker and
// negative-control tests set them.
type Mutant uint32

// The mutants: each is a defect this project or its predecessors found.
const (
	ScalarMaxCursor   Mutant = 1 << iota // cursor = max flushed position, ignoring pending
	SeedAtClaim                          // a claimed partition is settled at once
	KeepLiveOnFailure                    // a failed flush keeps the live buffer
	InclusiveBound                       // the cursor may reach a pending message's first position
	DropRedelivered                      // a redelivery at or below the cursor is acked unflushed
	AckBeforeCursor                      // ack right after the packs, before cursor and pack events
	ForgetNaked                          // nak'd messages leave the pending set
	NoEpochCheck                         // a fetch that raced a failure is buffered anyway
	NoAckFence                           // ack without checking the lease
	NoFetchDeadline                      // fetch past the local lease deadline; settle without waiting out old fetches
)

// Verdict is what to do with a received message.
type Verdict uint8

// Verdicts of Receive.
const (
	Buffer     Verdict = iota // buffered and pending
	Release                   // the partition is lost: release, neither ack nor nak
	NakHalted                 // the destination is halted: nak with a long delay
	NakEpoch                  // the fetch raced a failed flush: nak
	AckDrop                   // acked without a flush (DropRedelivered only)
	Consumed                  // the shell's lifecycle hook took it
	NakExpired                // fetched past the local lease deadline: nak, kept pending as nak'd
)

// Step is one step of a flush, in the order Flush.Next gives them.
type Step uint8

// The steps of a flush.
const (
	StepDone    Step = iota // nothing left
	StepWrite               // write the packs
	StepCursor              // advance the cursor (CursorTarget)
	StepPublish             // publish the pack events
	StepAck                 // check the lease and ack (Commit)
)

var stepNames = [...]string{"done", "write packs", "advance cursor", "publish pack events", "ack"}

func (s Step) String() string { return stepNames[s] }

var (
	normalSteps = []Step{StepWrite, StepCursor, StepPublish, StepAck}
	earlySteps  = []Step{StepWrite, StepAck, StepCursor, StepPublish}
)

var (
	// ErrOutOfOrder is returned when the shell completes a step that is not
	// the flush's next one.
	ErrOutOfOrder = errors.New("flush step out of order")
	// ErrLost is returned when a step completes after the partition was
	// lost: the flush goes no further (the shell fails it; nothing is
	// nak'd, published or acked).
	ErrLost = errors.New("partition lost")
)

// Span is a pending position range.
type Span struct {
	First, Last proto.Position
	Naked       bool // nak'd, awaiting redelivery
}

// Flush is one swapped-out buffer in flight. It cannot exist without the
// lease term and epoch it was started under.
type Flush[T Item] struct {
	Items []T
	Term  int64
	Epoch uint64
	d     *Dest[T]
	step  int
	steps []Step
}

// Next is the flush's next step.
func (f *Flush[T]) Next() Step {
	if f.step >= len(f.steps) {
		return StepDone
	}
	return f.steps[f.step]
}

// Done records that step s is complete (packs durable, cursor written or
// not needed, pack events published).
func (f *Flush[T]) Done(s Step) (err error) {
	defer func() {
		if f.d.p.rec != nil {
			f.d.p.record(Record{Ev: EvDone, Dest: f.d.Name, Step: s, Out: errText(err)})
		}
	}()
	if f.Next() != s || s == StepAck {
		return ErrOutOfOrder
	}
	if f.d.p.lost {
		return ErrLost
	}
	f.advance()
	return nil
}

func (f *Flush[T]) advance() {
	f.step++
	if f.step >= len(f.steps) && f.d.inflight == f {
		f.d.inflight = nil
	}
}

// Dest is one destination's protocol state in a partition.
type Dest[T Item] struct {
	Name     string
	p        *Partition[T]
	live     []T
	inflight *Flush[T]
	// cursor is the persisted cursor (loaded or written); maxResolved the
	// highest position in a durable, acked pack.
	cursor, maxResolved proto.Position
	pending             map[uint64]Span
	failGen, epoch      uint64
	halted              bool
}

// Partition is one owned partition under one lease term.
type Partition[T Item] struct {
	ID     int
	term   int64
	lost   bool
	seeded bool
	// expired: the lease deadline as the shell measures it locally passed
	// without a renewal; drained: one fetch wait has passed since the
	// claim, so no fetch opened under an earlier lease can still deliver.
	expired, drained bool
	gen              uint64 // failure generation (read epoch)
	loaded           map[string]proto.Position
	dests            map[string]*Dest[T]
	order            []string // dests in creation order (deterministic iteration)
	mut              Mutant
	rec              func(Record) // SetRecorder
}

// NewPartition is partition id claimed under lease term, with the cursors
// loaded from the state database. It is not settled.
func NewPartition[T Item](id int, term int64, loaded map[string]proto.Position, mut Mutant) *Partition[T] {
	if loaded == nil {
		loaded = map[string]proto.Position{}
	}
	return &Partition[T]{ID: id, term: term, loaded: loaded, dests: map[string]*Dest[T]{}, mut: mut, seeded: mut&SeedAtClaim != 0}
}

// Term is the lease term the partition was claimed under.
func (p *Partition[T]) Term() int64 { return p.term }

// Lost reports whether the partition's lease was lost.
func (p *Partition[T]) Lost() bool { return p.lost }

// Seeded reports whether the partition is settled (its cursors advance).
func (p *Partition[T]) Seeded() bool { return p.seeded }

// Expire records that the lease deadline, as the shell measures it on its
// own monotonic clock (the start of the last successful renewal plus the
// TTL, less a margin), passed: no fetch may start, and a message fetched
// from now on is not accepted (Receive: NakExpired). The deadline comes
// before the server's expiry, after which another replica may claim.
func (p *Partition[T]) Expire() {
	if !p.lost {
		p.expired = true
	}
	p.record(Record{Ev: EvExpire})
}

// Renewed records a renewal that succeeded with its deadline still ahead:
// the lease was held throughout (a renewal of an expired lease fails), so
// fetching resumes.
func (p *Partition[T]) Renewed() {
	if !p.lost {
		p.expired = false
	}
	p.record(Record{Ev: EvRenewed})
}

// Expired reports whether the local lease deadline passed unrenewed.
func (p *Partition[T]) Expired() bool { return p.expired }

// MayFetch reports whether the shell may start a fetch: the partition is
// held and its local lease deadline has not passed.
func (p *Partition[T]) MayFetch() bool {
	return !p.lost && (!p.expired || p.mut&NoFetchDeadline != 0)
}

// Drained records that one fetch wait (a fetch request's server-side
// expiry) has passed since the claim: a fetch a previous owner opened
// before its deadline, hence before its lease expired and this claim,
// delivers nothing more, so what it delivered is in the ack-pending count
// Settle reads. Settle refuses before.
func (p *Partition[T]) Drained() {
	p.drained = true
	p.record(Record{Ev: EvDrained})
}

// IsDrained reports whether Drained was recorded.
func (p *Partition[T]) IsDrained() bool { return p.drained }

// Gen is the failure generation; a fetch reads it before it starts.
func (p *Partition[T]) Gen() uint64 { return p.gen }

// Dests are the partition's destinations in creation order.
func (p *Partition[T]) Dests() []*Dest[T] {
	out := make([]*Dest[T], len(p.order))
	for i, n := range p.order {
		out[i] = p.dests[n]
	}
	return out
}

// Lookup returns destination name, or nil if it has none yet.
func (p *Partition[T]) Lookup(name string) *Dest[T] { return p.dests[name] }

// Dest returns destination name, creating it at its loaded cursor.
func (p *Partition[T]) Dest(name string) *Dest[T] {
	if d, ok := p.dests[name]; ok {
		return d
	}
	d := &Dest[T]{Name: name, p: p, pending: map[uint64]Span{}}
	if c, ok := p.loaded[name]; ok {
		d.cursor, d.maxResolved = c, c
	}
	p.dests[name] = d
	p.order = append(p.order, name)
	return d
}

// Tracked is the number of messages the partition tracks as pending.
func (p *Partition[T]) Tracked() int {
	n := 0
	for _, d := range p.dests {
		n += len(d.pending)
	}
	return n
}

// Settle is the consumer's ack-pending count: once it is no more than the
// messages tracked here, nothing is pending at another owner (a dead
// previous owner's messages stay ack-pending until redelivered here), and
// the cursors may advance. It reports whether the partition became seeded.
func (p *Partition[T]) Settle(ackPending int) (ok bool) {
	defer func() {
		if p.rec != nil {
			p.record(Record{Ev: EvSettle, N: ackPending, Out: fmt.Sprint(ok)})
		}
	}()
	if p.seeded || p.lost || ackPending > p.Tracked() || (!p.drained && p.mut&NoFetchDeadline == 0) {
		return false
	}
	p.seeded = true
	return true
}

// Lose marks the lease lost and returns every live buffered message, now
// dropped (the shell naks and releases them). In-flight flushes fail at
// their next step.
func (p *Partition[T]) Lose() []T {
	if p.lost {
		p.record(Record{Ev: EvLose})
		return nil
	}
	p.lost = true
	var out []T
	for _, n := range p.order {
		d := p.dests[n]
		out = append(out, d.live...)
		d.live = nil
	}
	p.record(Record{Ev: EvLose, Out: seqs(out)})
	return out
}

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

// Receive decides what to do with a message fetched at failure generation
// gen. hook, if not nil, is the shell's lifecycle (retired, held and full):
// it runs after the lost check and reports whether it consumed the message.
func (d *Dest[T]) Receive(it T, gen uint64, hook func() bool) (v Verdict) {
	m := it.Msg()
	defer func() {
		if d.p.rec != nil {
			d.p.record(Record{Ev: EvReceive, Dest: d.Name, Msg: &m, Gen: gen, Out: v.String()})
		}
	}()
	switch {
	case d.p.lost:
		return Release
	case d.p.expired && d.p.mut&NoFetchDeadline == 0:
		// Past the deadline this replica may no longer hold the lease: the
		// message is nak'd, but stays pending (nak'd) should the lease
		// turn out held (Renewed), so no cursor of this owner passes it.
		if m.Seq != 0 {
			d.pending[m.Seq] = Span{First: m.First, Last: m.Last, Naked: true}
		}
		return NakExpired
	case hook != nil && hook():
		return Consumed
	case d.halted:
		return NakHalted
	case d.p.mut&NoEpochCheck == 0 && d.failGen > gen:
		// The fetch raced a failed flush of this destination: the read is
		// discarded as if it never happened; the message redelivers.
		return NakEpoch
	case d.p.mut&DropRedelivered != 0 && m.Delivered > 1 && !d.cursor.Less(m.Last):
		return AckDrop
	}
	d.live = append(d.live, it)
	if m.Seq != 0 {
		d.pending[m.Seq] = Span{First: m.First, Last: m.Last}
	}
	return Buffer
}

// Unpend removes a message from the pending set (a retired destination's
// discarded message).
func (d *Dest[T]) Unpend(seq uint64) {
	delete(d.pending, seq)
	d.p.record(Record{Ev: EvUnpend, Dest: d.Name, Msg: &Msg{Seq: seq}})
}

// HoldNaked keeps a nak'd message pending (a held destination's surplus),
// so no cursor passes it.
func (d *Dest[T]) HoldNaked(m Msg) {
	d.p.record(Record{Ev: EvHoldNaked, Dest: d.Name, Msg: &m})
	if m.Seq != 0 {
		d.pending[m.Seq] = Span{First: m.First, Last: m.Last, Naked: true}
	}
}

// EvictLive empties the live buffer of a held destination, keeping every
// message pending as nak'd; it returns them for the shell to nak.
func (d *Dest[T]) EvictLive() []T {
	out := d.live
	d.live = nil
	for _, it := range out {
		d.markNaked(it.Msg().Seq)
	}
	d.p.record(Record{Ev: EvEvict, Dest: d.Name, Out: seqs(out)})
	return out
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
	inJob := make(map[uint64]bool, len(f.Items))
	for _, it := range f.Items {
		m := it.Msg()
		if hi.Less(m.Last) {
			hi = m.Last
		}
		inJob[m.Seq] = true
	}
	if d.p.mut&ScalarMaxCursor == 0 {
		for seq, s := range d.pending {
			if inJob[seq] {
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

// CursorWritten records that the cursor was written at pos (StepCursor).
func (d *Dest[T]) CursorWritten(f *Flush[T], pos proto.Position) (err error) {
	defer func() {
		if d.p.rec != nil {
			d.p.record(Record{Ev: EvWritten, Dest: d.Name, Pos: &pos, Out: errText(err)})
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
// the lease the flush started under is still held and live. It returns the
// messages to ack, or ok false when the ack is fenced (the shell treats
// the partition as lost and fails the flush).
func (d *Dest[T]) Commit(f *Flush[T], live bool) (ack []T, ok bool, err error) {
	defer func() {
		if d.p.rec == nil {
			return
		}
		out := "fenced"
		switch {
		case err != nil:
			out = err.Error()
		case ok:
			out = "ack " + seqs(ack)
		}
		d.p.record(Record{Ev: EvCommit, Dest: d.Name, Flag: live, Out: out})
	}()
	if f.Next() != StepAck {
		return nil, false, ErrOutOfOrder
	}
	if d.p.mut&NoAckFence == 0 && (!live || d.p.lost || d.p.term != f.Term) {
		return nil, false, nil
	}
	for _, it := range f.Items {
		m := it.Msg()
		delete(d.pending, m.Seq)
		if d.maxResolved.Less(m.Last) {
			d.maxResolved = m.Last
		}
	}
	f.advance()
	return f.Items, true, nil
}

// Fail applies the flush-failure rule to f: the in-flight and the live
// buffer are discarded, their messages nak'd (nak) but kept pending until
// redelivered, the read epoch bumped, and the destination halted on a
// permanent failure. For a lost partition (or lost true) nothing is nak'd:
// the victims are released and redeliver to the next owner.
func (d *Dest[T]) Fail(f *Flush[T], permanent, lost bool) (victims []T, nak bool) {
	defer func() {
		if d.p.rec == nil {
			return
		}
		d.p.record(Record{Ev: EvFail, Dest: d.Name, Flag: permanent, Lost: lost, Out: fmt.Sprint(nak, " ", seqs(victims))})
	}()
	if d.inflight == f {
		d.inflight = nil
	}
	if d.p.lost || lost {
		return f.Items, false
	}
	victims = f.Items
	if d.p.mut&KeepLiveOnFailure == 0 {
		victims = append(victims[:len(victims):len(victims)], d.live...)
		d.live = nil
	}
	for _, it := range victims {
		seq := it.Msg().Seq
		if d.p.mut&ForgetNaked != 0 {
			delete(d.pending, seq)
		} else {
			d.markNaked(seq)
		}
	}
	d.p.gen++
	d.failGen = d.p.gen
	d.epoch++
	if permanent {
		d.halted = true
	}
	return victims, true
}
