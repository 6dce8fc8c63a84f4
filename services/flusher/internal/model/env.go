package model

import (
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
)

// Change is one ROUTED message the routers publish to the partition: its
// position (1, 2, ...: the LSN) and the destinations it carries a slice
// of (a partition message; one destination: a per-destination message).
type Change struct {
	Pos   int
	Dests []int
}

// slice is the bit of change ch's slice of destination d in the durable
// and events sets.
func (c Config) slice(ch, d int) uint16 { return 1 << (ch*c.Dests + d) }

// has reports whether change ch carries a slice of destination d.
func (ch Change) has(d int) bool {
	for _, e := range ch.Dests {
		if e == d {
			return true
		}
	}
	return false
}

func (c Config) destNames(ch Change) string {
	out := ""
	for i, d := range ch.Dests {
		if i > 0 {
			out += "+"
		}
		out += c.destName(d)
	}
	return out
}

// Config is one configuration to explore.
type Config struct {
	Name     string
	Replicas int      // flusher replicas
	Dests    int      // destinations of the partition
	Changes  []Change // in commit order; routers may publish them in any order
	InOrder  bool     // routers publish in position order (one router)
	// Budgets of the faults (each is an event the model may take at any
	// point, at most this many times).
	Crashes        int // a replica dies (kill -9) and restarts empty
	LeaseExpiries  int // the partition lease expires under its holder
	FlushFailures  int // a pack write or pack-event publish fails
	Mutant         core.Mutant
	DepthFirst     bool // explore depth first (CheckDepthFirst)
	Progress       func(depth, states, frontier int)
	MaxStates      int // stop after this many distinct states (0: no limit)
	CheckInvariant bool
}

func (c Config) destName(d int) string { return "d" + string(rune('0'+d)) }

// item is a buffered slice as the model's shell holds it.
type item struct {
	seq, deliv, change uint8
	pos, dest, slices  uint8
}

func (it item) Msg() core.Msg {
	p := proto.Position{LSN: proto.LSN(it.pos), Seq: 1}
	return core.Msg{Seq: uint64(it.seq), Delivered: uint64(it.deliv), First: p, Last: p, Slices: int(it.slices)}
}

func encItem(b []byte, it item) []byte { return append(b, it.seq, it.deliv) }

// Message states on the ROUTED consumer.
const (
	msgNew     = iota // published, never delivered
	msgPending        // delivered, not acked (counted as ack-pending)
	msgAcked
)

// msg is one ROUTED message (stream sequence = index + 1).
type msg struct {
	change uint8
	status uint8
	deliv  uint8 // delivery count, capped
	holder int8  // replica of the current delivery; -1: redeliverable (nak'd or AckWait expired)
}

// replica is one flusher replica: the core of the partition it claimed
// (nil: it owns nothing).
type replica struct {
	p *core.Partition[item]
	// req is the fetch request (a pull request with a server-side
	// expiry, the fetch wait) the replica may still have open after its
	// lease deadline passed: the term it was opened under, or 0 for none.
	// It stays open until it expires.
	req int64
}

// Lease holders beyond replica indexes.
const (
	noHolder   = -1 // never claimed
	deadHolder = -2 // held by a replica that crashed
)

// state is one global state.
type state struct {
	msgs      []msg
	published uint8  // changes published to ROUTED (bit per change)
	durable   uint16 // slices in a durable pack (Config.slice)
	events    uint16 // slices in a pack whose event is on PACKS
	cursor    []proto.Position
	term      int64
	holder    int8
	live      bool // the lease is live (not expired)
	crashes   uint8
	expiries  uint8
	failures  uint8
	reps      []replica
}

// clone copies s for a successor by event a: the cores of the replicas a
// does not touch are shared (copy on write), as no event changes another
// replica's core.
func (s *state) clone(a action) *state {
	t := *s
	t.msgs = append([]msg(nil), s.msgs...)
	t.cursor = append([]proto.Position(nil), s.cursor...)
	t.reps = append([]replica(nil), s.reps...)
	if r := a.r; r >= 0 && int(r) < len(t.reps) && t.reps[r].p != nil {
		t.reps[r].p = t.reps[r].p.Clone()
	}
	return &t
}

func initial(c Config) *state {
	return &state{cursor: make([]proto.Position, c.Dests), holder: noHolder, reps: make([]replica, c.Replicas)}
}

// tracks reports whether replica r's core holds message seq (buffered or
// in flight): it keeps it alive with in-progress acks.
func (s *state) tracks(r int, seq uint8) bool {
	p := s.reps[r].p
	if p == nil || p.Lost() {
		return false
	}
	for _, d := range p.Dests() {
		for _, it := range d.Live() {
			if it.seq == seq {
				return true
			}
		}
		if f := d.Inflight(); f != nil {
			for _, it := range f.Items {
				if it.seq == seq {
					return true
				}
			}
		}
	}
	return false
}

func (s *state) ackPending() int {
	n := 0
	for _, m := range s.msgs {
		if m.status == msgPending {
			n++
		}
	}
	return n
}

// describe renders the state compactly for a trace.
func (s *state) describe(c Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "lease term %d holder %s live %v; cursors", s.term, holderName(s.holder), s.live)
	for d, v := range s.cursor {
		fmt.Fprintf(&b, " %s=%s", c.destName(d), v)
	}
	b.WriteString("; ROUTED")
	for i, m := range s.msgs {
		st := [...]string{"new", "pending", "acked"}[m.status]
		if m.status == msgPending {
			if m.holder < 0 {
				st = "redeliverable"
			} else {
				st = "at " + holderName(m.holder)
			}
		}
		ch := c.Changes[m.change]
		fmt.Fprintf(&b, " [#%d c%d pos %d->%s %s x%d]", i+1, m.change, ch.Pos, c.destNames(ch), st, m.deliv)
	}
	fmt.Fprintf(&b, "; durable %s events %s", c.bits(s.durable), c.bits(s.events))
	return b.String()
}

func holderName(h int8) string {
	switch h {
	case noHolder:
		return "none"
	case deadHolder:
		return "dead"
	}
	return "R" + string(rune('A'+h))
}

func (c Config) bits(v uint16) string {
	var out []string
	for ch := range c.Changes {
		for d := 0; d < c.Dests; d++ {
			if v&c.slice(ch, d) != 0 {
				out = append(out, fmt.Sprintf("c%d/%s", ch, c.destName(d)))
			}
		}
	}
	return "{" + strings.Join(out, ",") + "}"
}
