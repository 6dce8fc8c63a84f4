package model

import (
	"fmt"
	"io"
	"time"

	"github.com/sluice-cdc/sluice/services/flusher/internal/core"
)

// Small is the configuration `make model` explores: 2 flusher replicas, 2
// changes of one destination that routers may publish in either order,
// redelivery, a crash, a lease expiry and takeover, and a failed flush.
func Small() Config {
	return Config{
		Name: "small", Replicas: 2, Dests: 1,
		Changes: []Change{{Pos: 1, Dest: 0}, {Pos: 2, Dest: 0}},
		Crashes: 1, LeaseExpiries: 1, FlushFailures: 1,
	}
}

// Large is SLUICE_MODEL=large: 2 destinations in the partition, 3 changes
// (two of one destination, one of the other), the same faults, explored
// depth first (its breadth-first frontier would not fit in memory), at
// most 12 million distinct states.
func Large() Config {
	c := Small()
	c.Name = "large"
	c.Dests = 2
	c.Changes = []Change{{Pos: 1, Dest: 0}, {Pos: 2, Dest: 1}, {Pos: 3, Dest: 0}}
	c.MaxStates = 12_000_000
	c.DepthFirst = true
	return c
}

// A MutantCase is one defect the checker must catch.
type MutantCase struct {
	Name   string
	Mutant core.Mutant
}

// Mutants are the defects this project and its predecessors found, each a
// switch on the core.
var Mutants = []MutantCase{
	{"scalar-max cursor", core.ScalarMaxCursor},
	{"partition seeded at claim", core.SeedAtClaim},
	{"live buffer kept after a failed flush (no nak'd spans: Viaduck's rewind)", core.KeepLiveOnFailure | core.ForgetNaked},
	{"nak'd messages forgotten by the pending set", core.ForgetNaked},
	{"inclusive bound at the cursor", core.InclusiveBound},
	{"redeliveries at or below the cursor dropped", core.DropRedelivered},
	{"ack before the cursor write", core.AckBeforeCursor},
	{"ack without the lease fence", core.NoAckFence},
	{"fetch past the lease deadline, settle without waiting out old fetches", core.NoFetchDeadline},
}

// Run checks c (depth first if c.DepthFirst), then every mutant of it
// (breadth first), and writes a report to w; the
// last line is the summary `model: <N> distinct states, depth <D>, <K>/<K>
// mutants caught`. It reports whether the protocol held and every mutant
// was caught. With traces, each mutant's counterexample is printed.
func Run(w io.Writer, c Config, traces bool) bool {
	check := Check
	if c.DepthFirst {
		check = CheckDepthFirst
	}
	res := check(c)
	fmt.Fprintf(w, "model %s: %d replicas, %d destinations, %d changes, faults: %d crash, %d lease expiries, %d failed flushes\n",
		c.Name, c.Replicas, c.Dests, len(c.Changes), c.Crashes, c.LeaseExpiries, c.FlushFailures)
	fmt.Fprintf(w, "protocol: %d distinct states, depth %d, %s", res.States, res.Depth, res.Elapsed.Round(time.Millisecond))
	if c.DepthFirst {
		fmt.Fprint(w, " (depth first: depth is the longest path)")
	}
	if res.Truncated {
		fmt.Fprintf(w, " (stopped at %d states)", c.MaxStates)
	}
	fmt.Fprintln(w)
	ok := res.Violation == "" // a truncated exploration (MaxStates) found nothing either
	if res.Violation != "" {
		fmt.Fprintf(w, "VIOLATION: %s\n", res.Violation)
		for _, l := range res.Trace {
			fmt.Fprintln(w, l)
		}
	}
	caught := 0
	for _, m := range Mutants {
		mc := c
		mc.Mutant = m.Mutant
		mr := Check(mc) // breadth first: the shortest counterexample, within a few thousand states
		if mr.Violation == "" {
			fmt.Fprintf(w, "mutant %q NOT caught (%d states)\n", m.Name, mr.States)
			ok = false
			continue
		}
		caught++
		fmt.Fprintf(w, "mutant %q caught at depth %d after %d states (%s): %s\n", m.Name, mr.Depth, mr.States, mr.Elapsed.Round(time.Millisecond), mr.Violation)
		if traces {
			for _, l := range mr.Trace {
				fmt.Fprintln(w, "  "+l)
			}
		}
	}
	fmt.Fprintf(w, "model: %d distinct states, depth %d, %d/%d mutants caught\n", res.States, res.Depth, caught, len(Mutants))
	return ok && caught == len(Mutants)
}
