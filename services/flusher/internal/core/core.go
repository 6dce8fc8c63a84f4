package core

import (
	"errors"
	"fmt"

	"github.com/sluice-cdc/sluice/proto"
)

// Msg is what the protocol knows of one destination slice of a ROUTED
// message: a partition message carries the rows of Slices destinations,
// each destination's rows one slice, received by that destination's Dest.
type Msg struct {
	Seq         uint64 // stream sequence; 0 (unknown) is never pending
	Delivered   uint64 // delivery count, 1 on the first delivery
	First, Last proto.Position
	// Slices is the number of destination slices of the message (0 or 1:
	// one). The message is acked once every one of them is committed or
	// retired, nak'd once every one is resolved and one of them was
	// nak'd. A message of seq 0 is tracked per slice.
	Slices int `json:",omitempty"`
}

// Item is a buffered slice as the shell holds it.
type Item interface{ Msg() Msg }

// Resolved are the messages whose every slice has just been resolved
// (committed, retired, or nak'd), one slice of each standing for it: the
// shell acks each of Ack and naks each of Nak, once.
type Resolved[T Item] struct {
	Ack, Nak []T
}

// Empty reports whether nothing was resolved.
func (r Resolved[T]) Empty() bool { return len(r.Ack) == 0 && len(r.Nak) == 0 }

func (r Resolved[T]) text() string {
	out := ""
	if len(r.Ack) > 0 {
		out += "; ack " + seqs(r.Ack)
	}
	if len(r.Nak) > 0 {
		out += "; nak " + seqs(r.Nak)
	}
	return out
}

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
	AckFirstSlice                        // ack a message when its first slice commits
	ForgetHeld                           // a held destination's nak'd surplus leaves the pending set (shell tests only)
)

// Verdict is what to do with a received message.
type Verdict uint8

// Verdicts of Receive, for one slice. Every verdict but Buffer and
// Release resolves the slice at once; the message's fate (Resolved) waits
// for its other slices.
const (
	Buffer     Verdict = iota // buffered and pending
	Release                   // the partition is lost: release, neither ack nor nak
	NakHalted                 // the destination is halted: nak'd (long delay), kept pending as nak'd
	NakEpoch                  // the fetch raced a failed flush: nak'd, kept pending as nak'd
	AckDrop                   // done without a flush (DropRedelivered only)
	Retired                   // the lifecycle hook: the destination is retired, the slice done at once (discarded)
	NakExpired                // fetched past the local lease deadline: nak'd, kept pending as nak'd
	NakHeld                   // the lifecycle hook: held and full, nak'd (long delay), kept pending as nak'd
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
	// tracks are the messages with a slice not yet resolved (message.go);
	// npend counts, per message, the destinations holding it pending.
	tracks map[uint64]*track
	npend  map[uint64]int
	// order is dests in creation order (deterministic iteration), ""
	// where one was forgotten; orderAt indexes it (Forget is O(1), and
	// compacts once half of order is holes).
	order   []string
	orderAt map[string]int
	holes   int
	mut     Mutant
	rec     func(Record) // SetRecorder
}

// NewPartition is partition id claimed under lease term, with the cursors
// loaded from the state database. It is not settled.
func NewPartition[T Item](id int, term int64, loaded map[string]proto.Position, mut Mutant) *Partition[T] {
	if loaded == nil {
		loaded = map[string]proto.Position{}
	}
	return &Partition[T]{ID: id, term: term, loaded: loaded, dests: map[string]*Dest[T]{}, mut: mut, seeded: mut&SeedAtClaim != 0,
		tracks: map[uint64]*track{}, npend: map[uint64]int{}, orderAt: map[string]int{}}
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
	out := make([]*Dest[T], 0, len(p.dests))
	for _, n := range p.order {
		if n != "" {
			out = append(out, p.dests[n])
		}
	}
	return out
}

// Lookup returns destination name, or nil if it has none yet.
func (p *Partition[T]) Lookup(name string) *Dest[T] { return p.dests[name] }

// Dest returns destination name, creating it at its loaded cursor. A
// destination created now treats every fetch started before the last
// failure of the partition as raced (its failGen is the partition's): it
// may have been forgotten (Forget) after a failure such a fetch raced.
func (p *Partition[T]) Dest(name string) *Dest[T] {
	if d, ok := p.dests[name]; ok {
		return d
	}
	d := &Dest[T]{Name: name, p: p, pending: map[uint64]Span{}, failGen: p.gen}
	if c, ok := p.loaded[name]; ok {
		d.cursor, d.maxResolved = c, c
	}
	p.dests[name] = d
	p.orderAt[name] = len(p.order)
	p.order = append(p.order, name)
	return d
}

// Tracked is the number of distinct messages the partition tracks as
// pending (a message pending at several destinations counts once, as the
// consumer counts it once).
func (p *Partition[T]) Tracked() int { return len(p.npend) }

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
	clear(p.tracks) // nothing is acked or nak'd by the core any more
	var out []T
	for _, n := range p.order {
		if n == "" {
			continue
		}
		d := p.dests[n]
		out = append(out, d.live...)
		d.live = nil
	}
	p.record(Record{Ev: EvLose, Out: seqs(out)})
	return out
}
