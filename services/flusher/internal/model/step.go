package model

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
)

// kind is an event of the environment or of one replica's shell.
type kind uint8

const (
	aPublish     kind = iota // a router publishes change arg to ROUTED
	aFetch                   // replica r is delivered message arg
	aStart                   // replica r starts a flush of destination d
	aStep                    // the next step of r's flush of d succeeds
	aFailStep                // the next step (pack write or publish) of r's flush of d fails
	aSettle                  // r reads the consumer's ack-pending count
	aExpireLease             // the partition lease expires under its holder
	aLeaseLost               // r finds its lease lost (renewal refused)
	aClaim                   // r claims the partition
	aCrash                   // r dies and restarts empty
	aExpireMsg               // AckWait passes for message arg at a holder that dropped it
	aReqExpire               // r's open fetch request expires (its fetch wait passes)
	aDeadline                // r's lease deadline, as it measures it locally, passes
	aRenew                   // r renews its live lease after its local deadline passed
)

// action is one event; r is -1 for an event of the environment alone.
type action struct {
	k       kind
	r, d, a int8
}

const maxDeliv = 2 // delivery counts above 2 behave alike (only > 1 matters)

func pos(p int) proto.Position { return proto.Position{LSN: proto.LSN(p), Seq: 1} }

// enabled lists the events possible in s.
func enabled(c Config, s *state, out []action) []action {
	out = out[:0]
	for i := range c.Changes {
		if s.published&(1<<i) != 0 {
			continue
		}
		out = append(out, action{r: -1, k: aPublish, a: int8(i)})
		if c.InOrder {
			break
		}
	}
	if s.live && int(s.expiries) < c.LeaseExpiries && !s.holderBeforeDeadline() {
		out = append(out, action{r: -1, k: aExpireLease})
	}
	firstNew := -1
	for i, m := range s.msgs {
		if m.status == msgNew {
			firstNew = i
			break
		}
	}
	for i, m := range s.msgs {
		if m.status == msgPending && m.holder >= 0 && !s.tracks(int(m.holder), uint8(i+1)) {
			out = append(out, action{r: -1, k: aExpireMsg, a: int8(i)})
		}
	}
	for r := range s.reps {
		p := s.reps[r].p
		r8 := int8(r)
		if int(s.crashes) < c.Crashes && p != nil {
			out = append(out, action{k: aCrash, r: r8})
		}
		if p == nil || p.Lost() {
			if !s.live {
				out = append(out, action{k: aClaim, r: r8})
			}
		}
		if p == nil {
			continue
		}
		if s.reps[r].req != 0 {
			out = append(out, action{k: aReqExpire, r: r8})
		}
		// While its core lets it, the replica may have a fetch open at any
		// time; past its deadline, the one it opened before stays open
		// until it expires. The server delivers to an open request,
		// whatever the replica's lease (a lost partition's shell releases
		// what it receives).
		if s.reps[r].req != 0 || p.MayFetch() {
			for i, m := range s.msgs {
				if (m.status == msgPending && m.holder < 0) || i == firstNew {
					out = append(out, action{k: aFetch, r: r8, a: int8(i)})
				}
			}
		}
		if !p.Lost() {
			if !s.holds(r, p) {
				out = append(out, action{k: aLeaseLost, r: r8})
			}
			// A deadline matters only as the prelude of an expiry: with
			// none left in the budget, renewals keep up.
			if !p.Expired() && int(s.expiries) < c.LeaseExpiries {
				out = append(out, action{k: aDeadline, r: r8})
			} else if s.holds(r, p) {
				out = append(out, action{k: aRenew, r: r8})
			}
			if !p.Seeded() && s.ackPending() <= p.Tracked() {
				out = append(out, action{k: aSettle, r: r8})
			}
		}
		for di := 0; di < c.Dests; di++ {
			d := p.Lookup(c.destName(di))
			if d == nil {
				continue
			}
			f := d.Inflight()
			if f == nil {
				if len(d.Live()) > 0 && !d.Halted() && !p.Lost() {
					out = append(out, action{k: aStart, r: r8, d: int8(di)})
				}
				continue
			}
			out = append(out, action{k: aStep, r: r8, d: int8(di)})
			if n := f.Next(); (n == core.StepWrite || n == core.StepPublish) && int(s.failures) < c.FlushFailures {
				out = append(out, action{k: aFailStep, r: r8, d: int8(di)})
			}
		}
	}
	return out
}

// holderBeforeDeadline reports whether the lease's holder has not yet seen
// its local deadline pass: the server cannot expire the lease before that
// (the deadline is the renewal's start plus the TTL less a margin, on the
// replica's clock; the server's expiry is the renewal's commit plus the
// TTL on its own).
func (s *state) holderBeforeDeadline() bool {
	if s.holder < 0 {
		return false
	}
	p := s.reps[s.holder].p
	return p != nil && p.Term() == s.term && !p.Lost() && !p.Expired()
}

// oldRequestOpen reports whether a fetch request opened under a lease term
// before term is still open: one fetch wait after the claim of term none is.
func (s *state) oldRequestOpen(term int64) bool {
	for _, rp := range s.reps {
		if rp.req != 0 && rp.req < term {
			return true
		}
	}
	return false
}

// holds reports whether replica r holds the live lease p was claimed under.
func (s *state) holds(r int, p *core.Partition[item]) bool {
	return s.live && int(s.holder) == r && s.term == p.Term()
}

// nak is replica r's nak of message seq: redeliverable, if its current
// delivery is r's.
func (s *state) nak(r int, seq uint8) {
	m := &s.msgs[seq-1]
	if m.status == msgPending && int(m.holder) == r {
		m.holder = -1
	}
}

// lose is the shell's partitionLost: the core drops the live buffers,
// which are nak'd.
func (s *state) lose(r int) {
	for _, it := range s.reps[r].p.Lose() {
		s.nak(r, it.seq)
	}
}

// apply performs a on s (a clone) and returns a violated transition rule,
// or "". note, if not nil, receives what happened. Then every replica
// whose claim's fetch wait can have passed (no fetch opened under an
// earlier term is open) is drained at once: being drained only enables
// Settle, which stays an event of its own, so draining as early as
// possible loses no behavior.
func apply(c Config, s *state, a action, note func(string)) string {
	v := applyEvent(c, s, a, note)
	for r := range s.reps {
		p := s.reps[r].p
		if p == nil || p.Lost() || p.IsDrained() || s.oldRequestOpen(p.Term()) {
			continue
		}
		if r != int(a.r) {
			p = p.Clone() // copy on write (clone shares untouched cores)
			s.reps[r].p = p
		}
		p.Drained()
		if note != nil {
			note(fmt.Sprintf("%s has waited out a fetch wait since its claim: no earlier owner's fetch is open", holderName(int8(r))))
		}
	}
	return v
}

func applyEvent(c Config, s *state, a action, note func(string)) string {
	say := func(format string, args ...any) {
		if note != nil {
			note(fmt.Sprintf(format, args...))
		}
	}
	r := int(a.r)
	var p *core.Partition[item]
	if a.r >= 0 && r < len(s.reps) {
		p = s.reps[r].p
	}
	rn := holderName(a.r)
	switch a.k {
	case aPublish:
		ch := c.Changes[a.a]
		s.published |= 1 << a.a
		s.msgs = append(s.msgs, msg{change: uint8(a.a), holder: -1})
		say("a router publishes c%d (pos %d -> %s) as ROUTED #%d", a.a, ch.Pos, c.destNames(ch), len(s.msgs))
	case aExpireLease:
		s.live = false
		s.expiries++
		say("the partition lease (term %d, %s) expires", s.term, holderName(s.holder))
	case aExpireMsg:
		m := &s.msgs[a.a]
		say("AckWait passes for #%d at %s, which no longer holds it: redeliverable", a.a+1, holderName(m.holder))
		m.holder = -1
	case aCrash:
		s.crashes++
		s.reps[r].p, s.reps[r].req = nil, 0 // its connection's requests end with it
		if int(s.holder) == r {
			s.holder = deadHolder
		}
		say("%s crashes and restarts empty (its lease stays until it expires)", rn)
	case aClaim:
		s.term++
		s.holder, s.live = a.r, true
		loaded := map[string]proto.Position{}
		for d, v := range s.cursor {
			if !v.IsZero() {
				loaded[c.destName(d)] = v
			}
		}
		s.reps[r].p = core.NewPartition[item](0, s.term, loaded, c.Mutant)
		say("%s claims the partition (term %d), cursors loaded", rn, s.term)
	case aLeaseLost:
		say("%s finds its lease lost and drops its buffers (nak'd)", rn)
		s.lose(r)
	case aReqExpire:
		s.reps[r].req = 0
		say("%s's fetch request expires", rn)
	case aDeadline:
		p.Expire()
		s.reps[r].req = p.Term() // the fetch it opened last may still be open
		say("%s's local lease deadline passes: it opens no more fetches (its last may still be open)", rn)
	case aRenew:
		p.Renewed()
		say("%s renews its lease after its deadline: it fetches again", rn)
	case aSettle:
		n := s.ackPending()
		ok := p.Settle(n)
		say("%s reads ack-pending %d (tracks %d): settled %v", rn, n, p.Tracked(), ok)
	case aFetch:
		m := &s.msgs[a.a]
		m.status, m.holder = msgPending, a.r
		if m.deliv < maxDeliv {
			m.deliv++
		}
		ch := c.Changes[m.change]
		// The shell receives every slice of a message under one lock.
		var verdicts []string
		var res core.Resolved[item]
		for _, di := range ch.Dests {
			it := item{seq: uint8(a.a + 1), deliv: m.deliv, change: m.change, pos: uint8(ch.Pos), dest: uint8(di), slices: uint8(len(ch.Dests))}
			v, rs := p.Dest(c.destName(di)).Receive(it, p.Gen(), nil)
			verdicts = append(verdicts, c.destName(di)+" "+verdictName(v))
			res.Ack, res.Nak = append(res.Ack, rs.Ack...), append(res.Nak, rs.Nak...)
		}
		say("%s is delivered #%d (c%d pos %d -> %s, delivery %d): %s%s", rn, a.a+1, m.change, ch.Pos, c.destNames(ch), m.deliv, strings.Join(verdicts, ", "), resolvedText(res))
		if v := s.resolved(r, res, true); v != "" {
			return v
		}
	case aStart:
		d := p.Lookup(c.destName(int(a.d)))
		f := d.StartFlush()
		say("%s starts a flush of %s with %s", rn, d.Name, items(f.Items))
	case aFailStep:
		d := p.Lookup(c.destName(int(a.d)))
		f := d.Inflight()
		s.failures++
		step := f.Next()
		victims, _, res := d.Fail(f, false, false)
		say("%s: %s of %s fails; discarded %s%s", rn, step, d.Name, items(victims), resolvedText(res))
		return s.resolved(r, res, true)
	case aStep:
		return s.step(c, r, p, p.Lookup(c.destName(int(a.d))), say)
	}
	return ""
}

func (s *state) step(c Config, r int, p *core.Partition[item], d *core.Dest[item], say func(string, ...any)) string {
	rn := holderName(int8(r))
	f := d.Inflight()
	var bitsOf uint16
	for _, it := range f.Items {
		bitsOf |= c.slice(int(it.change), int(it.dest))
	}
	switch f.Next() {
	case core.StepWrite:
		s.durable |= bitsOf
		say("%s writes the pack of %s: durable %s", rn, d.Name, items(f.Items))
		return s.done(r, d, f, core.StepWrite, say)
	case core.StepPublish:
		// A pack event of a durable pack is harmless even from a replica
		// that lost its partition while publishing (the shell cannot
		// check and publish atomically); the core stops the flush after.
		s.events |= bitsOf
		say("%s publishes the pack event of %s %s", rn, d.Name, items(f.Items))
		return s.done(r, d, f, core.StepPublish, say)
	case core.StepCursor:
		target, ok := d.CursorTarget(f)
		if !ok {
			say("%s writes no cursor for %s (seeded %v, lost %v)", rn, d.Name, p.Seeded(), p.Lost())
			return s.done(r, d, f, core.StepCursor, say)
		}
		di := int(d.Name[1] - '0')
		if !s.holds(r, p) {
			say("%s's cursor write %s=%s is refused (fenced): partition lost", rn, d.Name, target)
			s.lose(r)
			d.Fail(f, false, true)
			return ""
		}
		// Rule 3: every change of d delivered so far at or below the
		// cursor is in a durable pack.
		for _, m := range s.msgs {
			ch := c.Changes[m.change]
			if ch.has(di) && m.deliv > 0 && !target.Less(pos(ch.Pos)) && s.durable&c.slice(int(m.change), di) == 0 {
				return fmt.Sprintf("cursor not prefix-complete: %s writes %s=%s past c%d (pos %d), delivered but in no durable pack", rn, d.Name, target, m.change, ch.Pos)
			}
		}
		// Monotonic: the owner's writes only move the cursor forward (the
		// table's GREATEST would hide a regression, so it is checked here).
		if target.Less(s.cursor[di]) {
			return fmt.Sprintf("cursor not monotonic: %s writes %s=%s below the stored %s", rn, d.Name, target, s.cursor[di])
		}
		s.cursor[di] = target
		if err := d.CursorWritten(f, target); err != nil {
			return "core refused its own cursor step: " + err.Error()
		}
		say("%s writes cursor %s=%s", rn, d.Name, target)
	case core.StepAck:
		live := s.holds(r, p)
		res, ok, err := d.Commit(f, live)
		if err != nil {
			return "core refused its own ack step: " + err.Error()
		}
		if !ok {
			say("%s's lease check before acking %s fails: partition lost, nothing acked", rn, d.Name)
			s.lose(r)
			d.Fail(f, false, true)
			return ""
		}
		if !live && len(res.Ack) > 0 {
			return fmt.Sprintf("a fenced replica acked: %s acks %s without the live lease", rn, items(res.Ack))
		}
		say("%s checks its lease and commits %s of %s%s", rn, items(f.Items), d.Name, resolvedText(res))
		return s.resolved(r, res, live)
	}
	return ""
}

// done completes step st of f; a step the core refuses because the
// partition is lost fails the flush (released, nothing nak'd).
func (s *state) done(r int, d *core.Dest[item], f *core.Flush[item], st core.Step, say func(string, ...any)) string {
	switch err := f.Done(st); {
	case err == nil:
	case errors.Is(err, core.ErrLost):
		d.Fail(f, false, true)
		say("%s's flush of %s stops: partition lost", holderName(int8(r)), d.Name)
	default:
		return "core refused its own step: " + err.Error()
	}
	return ""
}

// resolved performs the core's resolution of messages by replica r: ack
// (only with the live lease, which the caller checked) or nak, once each.
func (s *state) resolved(r int, res core.Resolved[item], live bool) string {
	for _, it := range res.Ack {
		m := &s.msgs[it.seq-1]
		if m.status == msgAcked {
			return fmt.Sprintf("message acked twice: #%d", it.seq)
		}
		m.status = msgAcked
	}
	for _, it := range res.Nak {
		s.nak(r, it.seq)
	}
	return ""
}

func resolvedText(res core.Resolved[item]) string {
	out := ""
	if len(res.Ack) > 0 {
		out += "; acks " + items(res.Ack)
	}
	if len(res.Nak) > 0 {
		out += "; naks " + items(res.Nak)
	}
	return out
}

// checkState checks the rules that hold in every state: every acked
// message has every slice in a durable pack whose event is published.
func checkState(c Config, s *state) string {
	for i, m := range s.msgs {
		if m.status != msgAcked {
			continue
		}
		for _, d := range c.Changes[m.change].Dests {
			if s.durable&c.slice(int(m.change), d) == 0 {
				return fmt.Sprintf("acked change lost: #%d (c%d) acked but its slice of %s is in no durable pack", i+1, m.change, c.destName(d))
			}
			if s.events&c.slice(int(m.change), d) == 0 {
				return fmt.Sprintf("acked before its pack event: #%d (c%d) acked (the partition's ack floor moves past it, and with it through_lsn) but no pack event holds its slice of %s", i+1, m.change, c.destName(d))
			}
		}
	}
	return ""
}

func verdictName(v core.Verdict) string {
	return [...]string{"buffered", "released (partition lost)", "nak'd (halted)", "nak'd (raced a failure)", "done without a flush (at or below the cursor)", "retired", "nak'd (past the lease deadline)", "nak'd (held)"}[v]
}

func items(its []item) string {
	out := "["
	for i, it := range its {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("#%d", it.seq)
	}
	return out + "]"
}
