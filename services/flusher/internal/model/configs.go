package model

import (
	"fmt"
	"io"
	"time"

	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
)

// Small is the first configuration `make model` explores: 2 flusher
// replicas, 2 messages of one destination that routers may publish in
// either order, redelivery, a crash, a lease expiry and takeover, and a
// failed flush.
func Small() Config {
	return Config{
		Name: "small", Replicas: 2, Dests: 1,
		Changes: []Change{{Pos: 1, Dests: []int{0}}, {Pos: 2, Dests: []int{0}}},
		Crashes: 1, LeaseExpiries: 1, FlushFailures: 1,
	}
}

// Slices is the second: one partition message carrying a slice of each of
// 2 destinations (each flushed on its own, in any interleaving), with the
// same replicas and faults. Small's two messages of one destination with
// a second destination's slice in one of them do not fit in a minute
// breadth first (over 750,000 states at depth 19 with a quarter million
// in the frontier); Large explores that depth first.
func Slices() Config {
	c := Small()
	c.Name, c.Dests = "slices", 2
	c.Changes = []Change{{Pos: 1, Dests: []int{0, 1}}}
	return c
}

// Large is SLUICE_MODEL=large: 2 destinations in the partition, 3
// messages (two carrying both destinations, one of one), the same faults,
// explored depth first (its breadth-first frontier would not fit in
// memory), at most 12 million distinct states.
func Large() Config {
	c := Small()
	c.Name = "large"
	c.Dests = 2
	c.Changes = []Change{{Pos: 1, Dests: []int{0, 1}}, {Pos: 2, Dests: []int{1}}, {Pos: 3, Dests: []int{0, 1}}}
	c.MaxStates = 12_000_000
	c.DepthFirst = true
	return c
}

// A MutantCase is one defect the checker must catch, in the configuration
// named (make model's: "small" or "slices").
type MutantCase struct {
	Name   string
	Mutant core.Mutant
	In     string
}

// Mutants are the defects this project and its predecessors found, each a
// switch on the core.
var Mutants = []MutantCase{
	{"scalar-max cursor", core.ScalarMaxCursor, "small"},
	{"partition seeded at claim", core.SeedAtClaim, "small"},
	{"live buffer kept after a failed flush (no nak'd spans: Viaduck's rewind)", core.KeepLiveOnFailure | core.ForgetNaked, "small"},
	{"nak'd messages forgotten by the pending set", core.ForgetNaked, "small"},
	{"inclusive bound at the cursor", core.InclusiveBound, "small"},
	{"redeliveries at or below the cursor dropped", core.DropRedelivered, "small"},
	{"ack before the cursor write", core.AckBeforeCursor, "small"},
	{"ack without the lease fence", core.NoAckFence, "small"},
	{"fetch past the lease deadline, settle without waiting out old fetches", core.NoFetchDeadline, "small"},
	{"a partition message acked when its first slice commits", core.AckFirstSlice, "slices"},
}

// Run checks each configuration (depth first if DepthFirst), then every
// mutant in the configuration it names (breadth first; a mutant naming
// none of cs is checked in the first), and writes a report to w; the last
// line is the summary `model: <N> distinct states, depth <D>, <K>/<K>
// mutants caught` (states summed, the deepest depth). It reports whether
// the protocol held and every mutant was caught. With traces, each
// mutant's counterexample is printed.
func Run(w io.Writer, cs []Config, traces bool) bool {
	ok := true
	states, depth := 0, 0
	for _, c := range cs {
		check := Check
		if c.DepthFirst {
			check = CheckDepthFirst
		}
		res := check(c)
		states += res.States
		depth = max(depth, res.Depth)
		fmt.Fprintf(w, "model %s: %d replicas, %d destinations, %d messages (%s), faults: %d crash, %d lease expiries, %d failed flushes\n",
			c.Name, c.Replicas, c.Dests, len(c.Changes), c.describeChanges(), c.Crashes, c.LeaseExpiries, c.FlushFailures)
		fmt.Fprintf(w, "protocol: %d distinct states, depth %d, %s", res.States, res.Depth, res.Elapsed.Round(time.Millisecond))
		if c.DepthFirst {
			fmt.Fprint(w, " (depth first: depth is the longest path)")
		}
		if res.Truncated {
			fmt.Fprintf(w, " (stopped at %d states)", c.MaxStates)
		}
		fmt.Fprintln(w)
		if res.Violation != "" { // a truncated exploration (MaxStates) found nothing either
			ok = false
			fmt.Fprintf(w, "VIOLATION: %s\n", res.Violation)
			for _, l := range res.Trace {
				fmt.Fprintln(w, l)
			}
		}
	}
	caught := 0
	for _, m := range Mutants {
		mc := cs[0]
		for _, c := range cs {
			if c.Name == m.In {
				mc = c
			}
		}
		mc.Mutant = m.Mutant
		mc.DepthFirst, mc.MaxStates = false, 0
		mr := Check(mc) // breadth first: the shortest counterexample, within a few thousand states
		if mr.Violation == "" {
			fmt.Fprintf(w, "mutant %q NOT caught in %s (%d states)\n", m.Name, mc.Name, mr.States)
			ok = false
			continue
		}
		caught++
		fmt.Fprintf(w, "mutant %q caught in %s at depth %d after %d states (%s): %s\n", m.Name, mc.Name, mr.Depth, mr.States, mr.Elapsed.Round(time.Millisecond), mr.Violation)
		if traces {
			for _, l := range mr.Trace {
				fmt.Fprintln(w, "  "+l)
			}
		}
	}
	fmt.Fprintf(w, "model: %d distinct states, depth %d, %d/%d mutants caught\n", states, depth, caught, len(Mutants))
	return ok && caught == len(Mutants)
}

func (c Config) describeChanges() string {
	out := ""
	for i, ch := range c.Changes {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("pos %d -> %s", ch.Pos, c.destNames(ch))
	}
	return out
}
